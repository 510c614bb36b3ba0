"""The statements of lists: a page of a queue's messages (by due time, or by key prefix
in key order, of one state or all), a page of its history, newest first, and the
payloads too large to read with a page's rows.

Every page is a keyset read: an index leads to the first row after the cursor
(decision 13). A page's SELECT is built once per combination of its filters
(`messages_page`, `history_page`) from what the dialect tells its planner
(`list_reads`) and how it compares keys in byte order (`keys_by_bytes`): the
dialect's variants of those two, under the same names, shape its pages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sqlalchemy import (
    BigInteger,
    String,
    Table,
    and_,
    bindparam,
    case,
    func,
    or_,
    select,
    tuple_,
    union_all,
)
from sqlalchemy.sql import ColumnElement, Select

from app.domain.pages import ListState
from app.storage.statements.common import columns, history, in_queue
from app.storage.statements.messages import MESSAGE_COLUMNS
from app.storage.tables import GROUP_INDEX, delayed_queue, delivery_history

__all__ = [
    "history_page",
    "keys_by_bytes",
    "list_reads",
    "messages_page",
    "payloads_by_id",
]


@dataclass(frozen=True)
class KeyOrder:
    """The message key compared (`after`, `at_or_after`, `before` a bound parameter) and
    sorted (`ascending`) in byte order; here the column's own order, which is byte
    order on MariaDB (utf8mb4_nopad_bin) and SQLite (BINARY)."""

    after: Callable[[Any], Any] = columns.pKey.__gt__
    at_or_after: Callable[[Any], Any] = columns.pKey.__ge__
    before: Callable[[Any], Any] = columns.pKey.__lt__
    ascending: Any = columns.pKey


@dataclass(frozen=True)
class ListReads:
    """What a list's page tells a planner that cannot find its index alone (MariaDB's,
    SQLite's).

    `expanded`: "(a, b) > (x, y)" is written out as "a > x OR (a = x AND b > y)",
    which the optimizer reads as a range of ("pKind", a, b); a row comparison it
    reads as no range at all, so a page after a cursor read the queue from its
    start. `forced`: the page names the index that leads to it (FORCE INDEX),
    whose range it then reads; left to itself the optimizer may read the queue by
    "pKind" alone (ref) whenever the page's range looks as large as the queue, and
    so read every row before the page. `split` (SQLite's): a page after a cursor is
    read as two ranges, the rest of the cursor's millisecond by id and the
    milliseconds beyond it; SQLite seeks a row comparison by its first column only,
    so a page from the middle of many messages due in one millisecond (or history
    rows of one purge) read every one before it. All measured in decision 13."""

    expanded: bool = False
    forced: bool = False
    split: bool = False


# The key column compared and sorted in byte order (UTF-8 bytes, or code points: the
# same order), as lists by key prefix read it; an index leads to it (revision 0006).
keys_by_bytes = KeyOrder()
# How a list's page shows its planner the index that leads to it.
list_reads = ListReads()

# Payloads by id ("ids"): a page's payloads too large to read with its rows, read after.
payloads_by_id = select(columns.id, columns.payload).where(
    columns.id.in_(bindparam("ids", expanding=True)), in_queue
)


@cache
def messages_page(
    keys: KeyOrder,
    reads: ListReads,
    *,
    by_key: bool,
    state: ListState,
    after: bool,
    since: bool,
    bounded: bool,
    grouped: bool = False,
) -> Select[Any]:
    """The page's SELECT: `keys` compare and sort keys in byte order and `reads` help the
    planner (the dialect's); the rest says which conditions the page has. Built once
    per combination."""
    conditions: list[ColumnElement[bool]] = [columns.pKind == bindparam("queue")]
    if grouped:  # one group's messages, from the group index (revision 0012)
        conditions.append(columns.messageGroup == bindparam("group", type_=String))
    if by_key:
        # The keys with the prefix are one range (key_prefix_end): no LIKE, so `%` and
        # `_` are characters like any other.
        conditions.append(keys.at_or_after(bindparam("low", type_=String)))
        if bounded:
            conditions.append(keys.before(bindparam("high", type_=String)))
        if after:
            conditions.append(keys.after(bindparam("after_key", type_=String)))
        order: tuple[Any, ...] = (keys.ascending,)
    else:
        if after and not reads.split:
            conditions.append(_after(reads, _DUE_ORDER, _AFTER))
        if since:
            # Offered or polled since the walk began: moved, listed already or to be
            # listed by a new walk (DuePosition).
            conditions.append(columns.createdAt < bindparam("since", type_=BigInteger))
            conditions.append(
                or_(
                    columns.lastDeliveredAt.is_(None),
                    columns.lastDeliveredAt < bindparam("since", type_=BigInteger),
                )
            )
        order = (columns.scheduledAt, columns.id)
    due = columns.scheduledAt <= bindparam("now", type_=BigInteger)
    if state is ListState.READY:
        conditions.append(due)
    elif state is ListState.SCHEDULED:
        conditions.append(and_(~due, columns.lockUuid.is_(None)))
    elif state is ListState.LEASED:
        conditions.append(and_(~due, columns.lockUuid.is_not(None)))
    payload_bytes = func.length(columns.payload)
    statement = (
        select(
            columns.id,
            *MESSAGE_COLUMNS,
            payload_bytes.label("payload_bytes"),
            case((payload_bytes <= bindparam("inline_payload_bytes"), columns.payload)).label(
                "payload"
            ),
        )
        .where(*conditions)
        .order_by(*order)
        .limit(bindparam("limit"))
    )
    # Leased messages are few, as a rule: the planner may rather read them by "lockUuid"
    # and sort them (revision 0004's index), so that page names no index.
    if reads.forced and state is not ListState.LEASED:
        index = GROUP_INDEX if grouped else _KEY_INDEX if by_key else _DUE_INDEX
        statement = _forcing(statement, delayed_queue, index)
    if after and not by_key and reads.split:
        statement = _split_at_the_cursor(statement, _DUE_ORDER, _AFTER)
    return statement


def _split_at_the_cursor(
    page: Select[Any],
    pair: tuple[ColumnElement[Any], ColumnElement[Any]],
    position: tuple[Any, Any],
    *,
    newest: bool = False,
) -> Select[Any]:
    """`page` (ordered by `pair`, ascending or `newest` first, without its cursor's
    condition) after `position`, read as two ranges (ListReads.split): the rest
    of the position's first value by the second, then the values after it; the
    first `limit` rows of both."""
    (first, second), (at, at_id) = pair, position
    if newest:
        ties = page.where(first == at, second < at_id).order_by(None).order_by(second.desc())
        beyond = page.where(first < at)
    else:
        ties = page.where(first == at, second > at_id).order_by(None).order_by(second)
        beyond = page.where(first > at)
    both = union_all(select(ties.subquery("ties")), select(beyond.subquery("beyond")))
    rows = both.subquery("page")
    order: list[Any] = [rows.c[str(column.key)] for column in (first, second)]
    if newest:
        order = [column.desc() for column in order]
    return select(rows).order_by(*order).limit(bindparam("limit"))


@cache
def history_page(reads: ListReads, *, key: bool, outcome: bool, before: bool) -> Select[Any]:
    """A history page's SELECT, newest first; built once per combination of filters."""
    conditions: list[ColumnElement[bool]] = [history.queue == bindparam("queue")]
    if key:
        conditions.append(history.key == bindparam("key"))
    if outcome:
        conditions.append(history.outcome == bindparam("outcome"))
    if before and not reads.split:
        conditions.append(_after(reads, _HISTORY_ORDER, _BEFORE, newest=True))
    statement = (
        select(
            history.id,
            history.key,
            history.outcome,
            history.scheduledAt,
            history.createdAt,
            history.firstDeliveredAt,
            history.lastDeliveredAt,
            history.deliveries,
            history.finishedAt,
        )
        .where(*conditions)
        .order_by(history.finishedAt.desc(), history.id.desc())
        .limit(bindparam("limit"))
    )
    if reads.forced:
        index = _HISTORY_KEY_INDEX if key else _HISTORY_OUTCOME_INDEX if outcome else _HISTORY_INDEX
        statement = _forcing(statement, delivery_history, index)
    if before and reads.split:
        statement = _split_at_the_cursor(statement, _HISTORY_ORDER, _BEFORE, newest=True)
    return statement


# A page's order, and its cursor's position as bound parameters.
_DUE_ORDER: tuple[ColumnElement[Any], ColumnElement[Any]] = (columns.scheduledAt, columns.id)
_HISTORY_ORDER: tuple[ColumnElement[Any], ColumnElement[Any]] = (history.finishedAt, history.id)
_AFTER: tuple[Any, Any] = (bindparam("after_at", type_=BigInteger), bindparam("after_id"))
_BEFORE: tuple[Any, Any] = (bindparam("before_at", type_=BigInteger), bindparam("before_id"))


# The indexes that lead to each page (revision 0006), named where the dialect must.
_DUE_INDEX = "delayed_queue__kind_scheduled_at_id_idx"
_KEY_INDEX = "delayed_queue__kind_key_idx"
_HISTORY_INDEX = "delivery_history__queue_finished_at_id_idx"
_HISTORY_KEY_INDEX = "delivery_history__queue_key_finished_at_id_idx"
_HISTORY_OUTCOME_INDEX = "delivery_history__queue_outcome_finished_at_id_idx"


def _after(
    reads: ListReads,
    pair: tuple[ColumnElement[Any], ColumnElement[Any]],
    position: tuple[Any, Any],
    *,
    newest: bool = False,
) -> ColumnElement[bool]:
    """The rows after `position` in the order of `pair` (ascending; descending when
    `newest`): a row comparison, or written out where the dialect's planner reads no
    range from one (ListReads)."""
    (first, second), (at, at_id) = pair, position
    if not reads.expanded:
        rows, bound = tuple_(first, second), tuple_(at, at_id)
        return rows < bound if newest else rows > bound
    if newest:
        return or_(first < at, and_(first == at, second < at_id))
    return or_(first > at, and_(first == at, second > at_id))


def _forcing(statement: Select[Any], table: Table, index: str) -> Select[Any]:
    """`statement` reading `table` by `index` only (MariaDB's FORCE INDEX; ListReads)."""
    assert index in {found.name for found in table.indexes}, index
    return statement.with_hint(table, f"FORCE INDEX ({index})")
