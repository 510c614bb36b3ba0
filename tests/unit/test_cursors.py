"""decode_cursor: every position a list hands out reads back as itself, and any other
text is CursorNotFound, whatever its nesting, size or encoding (app/domain/pages.py)."""

from __future__ import annotations

import base64

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.domain.errors import CursorNotFound
from app.domain.formats import EARLIEST_MS
from app.domain.pages import (
    DuePosition,
    HistoryPosition,
    KeyPosition,
    Position,
    decode_cursor,
    encode_cursor,
)
from tests.contract.hostile_cursors import REPORTED, hostile_cursors

KINDS = (DuePosition, KeyPosition, HistoryPosition)
LARGEST = 2**63 - 1
NATURALS = st.integers(0, LARGEST)

positions: st.SearchStrategy[Position] = st.one_of(
    # A due time before 1970 is negative (a message may be due from year 1): a BIGINT's.
    st.builds(DuePosition, st.integers(-LARGEST - 1, LARGEST), NATURALS, NATURALS),
    st.builds(HistoryPosition, NATURALS, NATURALS),
    # A key is 1-200 characters, none of them a control character (no surrogate either:
    # a key is text a database stores as UTF-8).
    st.builds(
        KeyPosition,
        st.text(st.characters(exclude_categories=["Cc", "Cs"]), min_size=1, max_size=200),
    ),
)


@given(position=positions)
@example(position=DuePosition(LARGEST, 0, LARGEST))
@example(position=DuePosition(EARLIEST_MS, 7, 0))
@example(position=DuePosition(-LARGEST - 1, 0, 0))
@example(position=KeyPosition('"\\/[{}],'))
def test_every_position_reads_back_as_itself_and_as_no_other_kind(position):
    cursor = encode_cursor(position)
    assert decode_cursor(cursor, type(position)) == position
    with pytest.raises(CursorNotFound, match="another kind"):
        decode_cursor(cursor, *(kind for kind in KINDS if kind is not type(position)))


@settings(max_examples=500)
@given(cursor=hostile_cursors)
@example(cursor=REPORTED)
def test_a_cursor_no_list_handed_out_names_no_page(cursor):
    with pytest.raises(CursorNotFound, match="not one this list handed out"):
        decode_cursor(cursor, *KINDS)


@given(text=st.text())
def test_any_text_is_a_cursor_handed_out_or_none(text):
    # Whatever reaches it (the API lets through base64url only): a position, which is
    # then the one this very text holds, or CursorNotFound; never another error.
    try:
        position = decode_cursor(text, *KINDS)
    except CursorNotFound:
        return
    assert encode_cursor(position) == text


@pytest.mark.parametrize("opening", [b"[", b"{", b'{"a":', b'["d",', b'["k",['])
def test_nesting_deeper_than_any_stack_names_no_page(opening):
    cursor = base64.urlsafe_b64encode(opening * 100_000).rstrip(b"=").decode()
    with pytest.raises(CursorNotFound):
        decode_cursor(cursor, *KINDS)
