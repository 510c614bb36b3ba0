"""Pages of a list (a queue's messages, its delivery history) and the opaque cursors
that lead from one page to the next (docs/guide/messages.md,
docs/decisions/0013-list-pages.md).

A cursor holds the position after the last row of its page: the next page starts
strictly after it, so rows inserted behind it are not read again and rows ahead
of it are not skipped (keyset paging, no OFFSET).
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass
from enum import StrEnum

from app.domain.errors import CursorNotFound
from app.domain.formats import KEY_PATTERN
from app.domain.messages import Finish, Message

MAX_PAGE = 500
DEFAULT_PAGE = 50
# What a cursor looks like: base64url without padding (encode_cursor). One that does not
# is invalid input; one that does but that no list handed out names no page.
CURSOR_PATTERN = r"^[A-Za-z0-9_-]+$"
# The longest cursor a list takes. The longest one encode_cursor writes, after a key of
# 200 characters of 4 UTF-8 bytes each, escaped in JSON and base64: ~1.1 KB.
MAX_CURSOR_LENGTH = 2048


class ListState(StrEnum):
    """Which messages a list shows (`ready`, `scheduled`, `leased`: see State)."""

    ALL = "all"
    READY = "ready"
    SCHEDULED = "scheduled"
    LEASED = "leased"


@dataclass(frozen=True, slots=True)
class DuePosition:
    """After the message due at `at` with row id `id`, in a walk that began at `since`.

    A message offered or polled at `since` or later (the first page's time) has moved
    since the walk began (its due time changed): later pages leave it out, so it is
    never listed twice in one walk, while every message that stayed in place is listed
    once. Times are the service's clock: a message offered or polled in the very
    millisecond the walk began counts as moved, and so may be left to a new walk.
    Releases, lease extensions and a poll's hold of a message past its delivery limit
    stamp no time; a message moved so during a walk may be listed twice, or not at
    all. So may one moved by a request that read the time before the walk's first
    page and wrote after it (a poll that waited for a connection, an offer that
    waited for a row lock: at most the lock bound), or by a replica whose clock runs
    behind (docs/decisions/0013)."""

    at: int
    id: int
    since: int


@dataclass(frozen=True, slots=True)
class KeyPosition:
    """After the message with this key (lists by key prefix go in key order)."""

    key: str


@dataclass(frozen=True, slots=True)
class HistoryPosition:
    """Before the history row that finished at `finished_at` with row id `id` (newest first)."""

    finished_at: int
    id: int


Position = DuePosition | KeyPosition | HistoryPosition


@dataclass(frozen=True, slots=True)
class MessagePage:
    messages: list[Message]
    # Where the next page starts; None when this one is the last.
    after: DuePosition | KeyPosition | None


@dataclass(frozen=True, slots=True)
class HistoryEntry:
    """One message that left its queue: when it was asked for and created, its deliveries,
    how it ended and when."""

    queue: str
    key: str
    outcome: Finish
    scheduled_at: int
    created_at: int
    first_delivered_at: int | None
    last_delivered_at: int | None
    deliveries: int
    finished_at: int


@dataclass(frozen=True, slots=True)
class HistoryPage:
    entries: list[HistoryEntry]
    after: HistoryPosition | None


def key_prefix_end(prefix: str) -> str | None:
    """The least string after every string that starts with `prefix`, in code point order
    (which is UTF-8 byte order): keys with the prefix are exactly those in
    [prefix, end). None when there is no such string (the prefix ends in U+10FFFF
    only): then the range has no end."""
    while prefix:
        last = ord(prefix[-1]) + 1
        if last == 0xD800:  # surrogates are no characters of a stored key
            last = 0xE000
        if last <= 0x10FFFF:
            return prefix[:-1] + chr(last)
        prefix = prefix[:-1]
    return None


def encode_cursor(position: Position) -> str:
    """`position` as an opaque, URL-safe string."""
    if isinstance(position, DuePosition):
        fields: list[object] = ["d", position.at, position.id, position.since]
    elif isinstance(position, KeyPosition):
        fields = ["k", position.key]
    else:
        fields = ["h", position.finished_at, position.id]
    text = json.dumps(fields, separators=(",", ":"), ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(text).rstrip(b"=").decode()


# The texts encode_cursor writes, and so the only ones a cursor is read from: a kind and
# integers (0 to 2**63 - 1, at most 19 digits; a due time may be negative too, down to
# -2**63: before 1970), or a kind and one JSON string. A client's
# cursor is matched against them before any JSON parser sees it: Python's json recurses
# once per level of nesting, and a cursor of ~990 `[` (1,320 characters, within the
# cursor's bound) once ran it out of stack, a 500 where a cursor that names nothing is 404.
_INTEGER = r"(0|[1-9][0-9]{0,18})"
_SIGNED = r"(0|-?[1-9][0-9]{0,18})"
_BIGINT = range(-(2**63), 2**63)
_DUE = re.compile(rf'\["d",{_SIGNED},{_INTEGER},{_INTEGER}\]')
_HISTORY = re.compile(rf'\["h",{_INTEGER},{_INTEGER}\]')
_KEYED = re.compile(r'\["k",("(?:[^"\\]|\\.)*")\]', re.DOTALL)


def decode_cursor(cursor: str, *kinds: type[Position]) -> Position:
    """The position `cursor` holds, which must be of one of `kinds`; CursorNotFound otherwise."""
    position = _handed_out(cursor)
    if position is None:
        raise CursorNotFound("the cursor names no page: it is not one this list handed out")
    if not isinstance(position, kinds):
        raise CursorNotFound(
            "the cursor names no page of this list: it belongs to another kind (another order)"
        )
    return position


def _handed_out(cursor: str) -> Position | None:
    """The position in `cursor` if encode_cursor could have written `cursor`, character for
    character; None for anything else, whatever its size, nesting or encoding."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        position = _read_position(text)
        # Written back, it must be the very cursor: no other base64 or JSON spelling of
        # the same position (padding bits, escapes, spaces) is one that was handed out.
        if position is None or encode_cursor(position) != cursor:
            return None
    except ValueError:  # not base64 or not UTF-8; a bad escape; a lone surrogate in a key
        return None
    return position


def _read_position(text: str) -> Position | None:
    """The position `text` spells in one of encode_cursor's shapes, or None."""
    if match := _DUE.fullmatch(text):
        numbers = [int(number) for number in match.groups()]
        return DuePosition(*numbers) if all(n in _BIGINT for n in numbers) else None
    if match := _HISTORY.fullmatch(text):
        numbers = [int(number) for number in match.groups()]
        return HistoryPosition(*numbers) if all(n in _BIGINT for n in numbers) else None
    if match := _KEYED.fullmatch(text):
        key = json.loads(match[1])  # one JSON string, which nests nothing
        return KeyPosition(key) if re.fullmatch(KEY_PATTERN, key) else None
    return None
