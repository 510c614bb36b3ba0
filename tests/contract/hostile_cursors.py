"""Cursors no list ever hands out, for tests/contract/test_cursors.py and
tests/unit/test_cursors.py: random bytes, deep nestings, huge and odd numbers, odd unicode,
and other spellings of real positions. Each fits the API's bound (2,048 characters of
base64url, so 1,536 bytes) and is wrong by construction, never by chance."""

from __future__ import annotations

import base64
import json

from hypothesis import strategies as st

from app.domain.pages import DuePosition, HistoryPosition, KeyPosition, Position, encode_cursor

# Bytes of text behind the longest cursor the API takes (2,048 base64url characters).
MOST_BYTES = 1536
_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

# 990 `[` (1,320 characters, within the bound): once ran Python's json out of stack, a 500.
REPORTED = "W1tb" * 330


def as_cursor(raw: bytes) -> str:
    """`raw` as a cursor's characters (base64url, no padding), cut to the API's bound."""
    return base64.urlsafe_b64encode(raw[:MOST_BYTES]).rstrip(b"=").decode()


_random_bytes = st.binary(min_size=1, max_size=MOST_BYTES)

_nestings = st.builds(
    lambda head, opening, depth, closed: (
        head + opening * depth + (b"]" if opening == b"[" else b"}") * depth * closed
    ),
    st.sampled_from([b"", b'["d",', b'["h",1,', b'["k",', b'["d",1,2,']),
    st.sampled_from([b"[", b"{", b'{"a":', b'{"k":[']),
    st.integers(1, MOST_BYTES),
    st.booleans(),
).map(lambda text: text[:MOST_BYTES])

# Numbers a position cannot hold, or spelled as encode_cursor never spells one.
_odd_numbers = st.one_of(
    st.integers(min_value=2**63).map(str),
    st.integers(max_value=-(2**63) - 1).map(str),
    st.integers(20, MOST_BYTES - 20).map(lambda digits: "9" * digits),
    st.integers(0, 2**63 - 1).map(lambda number: f"0{number}"),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["1e999", "-0", "1.0", "1E3", "NaN", "Infinity", "true", "null", '"1"']),
)
_numbered = st.builds(
    lambda shape, odd, place: shape.format(*(odd if index == place else "1" for index in range(3))),
    st.sampled_from(['["d",{},{},{}]', '["h",{},{}]']),
    _odd_numbers,
    st.integers(0, 1),
).map(lambda text: text.encode()[:MOST_BYTES])
# A negative row id or walk time (only a due time, the first of "d", may be negative).
_negative = st.integers(max_value=-1).map(str)
_negatives = st.one_of(
    st.builds('["d",1,{},1]'.format, _negative),
    st.builds('["d",1,1,{}]'.format, _negative),
    st.builds('["h",{},1]'.format, _negative),
    st.builds('["h",1,{}]'.format, _negative),
).map(lambda text: text.encode()[:MOST_BYTES])

# A key no list holds (a control character, a lone surrogate, empty, too long), spelled
# with or without escapes.
_bad_keys = st.one_of(
    st.builds(
        lambda before, bad, after: before + bad + after,
        st.text(max_size=50),
        st.characters(categories=["Cc", "Cs"]),
        st.text(max_size=50),
    ),
    st.just(""),
    st.text(min_size=201, max_size=300),
)
_keyed = st.builds(
    lambda key, ascii_only: f'["k",{json.dumps(key, ensure_ascii=ascii_only)}]'.encode(
        "utf-8", "surrogatepass"
    ),
    _bad_keys,
    st.booleans(),
)

# A position a list does hand out, written other than encode_cursor writes it.
_positions: st.SearchStrategy[Position] = st.one_of(
    st.builds(DuePosition, *[st.integers(0, 2**63 - 1)] * 3),
    st.builds(HistoryPosition, *[st.integers(0, 2**63 - 1)] * 2),
    st.builds(
        KeyPosition,
        st.text(st.characters(exclude_categories=["Cc", "Cs"]), min_size=1, max_size=200),
    ),
)


def _respelled(position: Position, how: str) -> bytes:
    text = base64.urlsafe_b64decode(encode_cursor(position) + "==").decode()
    if how == "spaces":
        return text.replace(",", ", ").encode()
    if how == "utf-16":
        return text.encode("utf-16")
    return (" " + text).encode()


def _padding_bits_set(position: Position) -> str:
    """The cursor with a bit set that base64 leaves unused: the same bytes, other characters
    (a cursor of a whole number of 3-byte groups has no such bit)."""
    cursor = encode_cursor(position)
    last = _ALPHABET[_ALPHABET.index(cursor[-1]) ^ 1]
    return cursor[:-1] + last


_other_spellings = st.one_of(
    st.builds(_respelled, _positions, st.sampled_from(["spaces", "utf-16", "leading space"])).map(
        as_cursor
    ),
    _positions.filter(lambda position: len(encode_cursor(position)) % 4).map(_padding_bits_set),
)

# Every cursor above, as the characters a client sends.
hostile_cursors: st.SearchStrategy[str] = st.one_of(
    st.one_of(_random_bytes, _nestings, _numbered, _negatives, _keyed).map(as_cursor),
    _other_spellings,
)
