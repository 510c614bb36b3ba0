"""Lists: a queue's messages a page at a time (by due time, or by key prefix in key
order, of one state or all) and its delivery history, newest first (SPEC §8).

Every page is a keyset read: an index leads to the first row after the cursor
(decision 13), so a page costs what its rows cost, whatever the queue's size.
"""

from __future__ import annotations

from collections.abc import Sequence
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

from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES as MESSAGE_ENVELOPE_BYTES
from app.domain.messages import Finish
from app.domain.pages import (
    DuePosition,
    HistoryEntry,
    HistoryPage,
    HistoryPosition,
    KeyPosition,
    ListState,
    MessagePage,
    key_prefix_end,
)
from app.storage import lease_sql, sql
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.messages import message_of
from app.storage.runner import Runner
from app.storage.tables import delayed_queue, delivery_history

columns = sql.columns
history = sql.history
# Bytes of a page's payloads read with its rows; larger ones are read after, by id, in
# results of about this size (as a poll reads them: lease_sql.PAYLOAD_READ_BYTES).
_INLINE_BYTES = lease_sql.PAYLOAD_READ_BYTES
# A page's bound in payload bytes when it has none.
_UNBOUNDED = 2**62


class SqlLists:
    """Pages of messages and of history."""

    def __init__(self, runner: Runner, dialect: Dialect) -> None:
        self.runner = runner
        self.dialect = dialect

    async def messages(
        self,
        queue: str,
        *,
        state: ListState = ListState.ALL,
        prefix: str | None = None,
        after: DuePosition | KeyPosition | None = None,
        limit: int,
        now: int,
        max_bytes: int | None = None,
    ) -> MessagePage:
        """Up to `limit` messages after `after`: by due time then id, or with `prefix` (a
        key prefix, every character literal) by key. A page stops early where its
        payloads would pass `max_bytes` (the first message always)."""
        by_key = bool(prefix)
        statement, parameters = self.messages_query(
            queue, state=state, prefix=prefix, after=after, limit=limit, now=now
        )

        rows = await self.runner.rows(statement, parameters)
        more = len(rows) > limit
        rows = rows[:limit]
        sizes = [row.payload_bytes + MESSAGE_ENVELOPE_BYTES for row in rows]
        fitting = lease_sql.answer_length(sizes, _UNBOUNDED if max_bytes is None else max_bytes)
        more = more or fitting < len(rows)
        rows = rows[:fitting]
        payloads = await self._payloads(queue, [row for row in rows if row.payload is None])
        messages = [
            message_of(queue, row, row.payload if row.payload is not None else payloads[row.id])
            for row in rows
            if row.payload is not None or row.id in payloads  # else deleted meanwhile
        ]
        if not (more and rows):
            return MessagePage(messages, None)
        last = rows[-1]
        if by_key:
            return MessagePage(messages, KeyPosition(last.pKey))
        since = after.since if isinstance(after, DuePosition) else now
        return MessagePage(messages, DuePosition(last.scheduledAt, last.id, since))

    def messages_query(
        self,
        queue: str,
        *,
        state: ListState = ListState.ALL,
        prefix: str | None = None,
        after: DuePosition | KeyPosition | None = None,
        limit: int,
        now: int,
    ) -> tuple[Select[Any], dict[str, Any]]:
        """The SELECT of `messages`' page and its parameters (one row more than `limit`:
        whether there is a next page); bench/lists.py explains it."""
        by_key = bool(prefix)
        statement = _messages_statement(
            self.dialect.keys_by_bytes,
            self.dialect.list_reads,
            by_key=by_key,
            state=state,
            after=after is not None,
            since=isinstance(after, DuePosition),
            bounded=by_key and key_prefix_end(prefix or "") is not None,
        )
        parameters: dict[str, Any] = {
            "queue": queue,
            "now": now,
            "limit": limit + 1,  # one more: whether there is a next page
            "inline_payload_bytes": _INLINE_BYTES // (limit + 1),
        }
        if by_key:
            assert prefix is not None
            parameters["low"] = prefix
            if (end := key_prefix_end(prefix)) is not None:
                parameters["high"] = end
        if isinstance(after, DuePosition):
            parameters |= {"after_at": after.at, "after_id": after.id, "since": after.since}
        elif isinstance(after, KeyPosition):
            parameters["after_key"] = after.key
        return statement, parameters

    async def _payloads(self, queue: str, rows: Sequence[Any]) -> dict[int, bytes]:
        """The payloads of `rows` (too large to read with them), by id; a message deleted
        since has none, and one updated since has its new payload (read after its row)."""
        if not rows:
            return {}
        sized = [(row.id, row.payload_bytes) for row in rows]

        async def read(connection: Connection) -> dict[int, bytes]:
            return await lease_sql.read_payloads(
                connection, self.dialect.payloads_by_id, sized, {"queue": queue}
            )

        return await self.runner.read(read)

    async def history(
        self,
        queue: str,
        *,
        key: str | None = None,
        outcome: Finish | None = None,
        before: HistoryPosition | None = None,
        limit: int,
    ) -> HistoryPage:
        """Up to `limit` history rows of `queue` (of one key, of one outcome), newest first,
        older than `before`."""
        statement, parameters = self.history_query(
            queue, key=key, outcome=outcome, before=before, limit=limit
        )

        rows = await self.runner.rows(statement, parameters)
        more = len(rows) > limit
        rows = rows[:limit]
        entries = [
            HistoryEntry(
                queue=queue,
                key=row.key,
                outcome=Finish(row.outcome),
                scheduled_at=row.scheduledAt,
                created_at=row.createdAt,
                first_delivered_at=row.firstDeliveredAt,
                last_delivered_at=row.lastDeliveredAt,
                deliveries=row.deliveries,
                finished_at=row.finishedAt,
            )
            for row in rows
        ]
        after = HistoryPosition(rows[-1].finishedAt, rows[-1].id) if more else None
        return HistoryPage(entries, after)

    def history_query(
        self,
        queue: str,
        *,
        key: str | None = None,
        outcome: Finish | None = None,
        before: HistoryPosition | None = None,
        limit: int,
    ) -> tuple[Select[Any], dict[str, Any]]:
        """The SELECT of `history`'s page and its parameters (one row more than `limit`)."""
        statement = _history_statement(
            self.dialect.list_reads,
            key=key is not None,
            outcome=outcome is not None,
            before=before is not None,
        )
        parameters: dict[str, Any] = {"queue": queue, "limit": limit + 1}
        if key is not None:
            parameters["key"] = key
        if outcome is not None:
            parameters["outcome"] = outcome.value
        if before is not None:
            parameters |= {"before_at": before.finished_at, "before_id": before.id}
        return statement, parameters


@cache
def _messages_statement(
    keys: sql.KeyOrder,
    reads: sql.ListReads,
    *,
    by_key: bool,
    state: ListState,
    after: bool,
    since: bool,
    bounded: bool,
) -> Select[Any]:
    """The page's SELECT: `keys` compare and sort keys in byte order and `reads` help the
    planner (the dialect's); the rest says which conditions the page has. Built once
    per combination."""
    conditions: list[ColumnElement[bool]] = [columns.pKind == bindparam("queue")]
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
            *sql.MESSAGE_COLUMNS,
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
        statement = _forcing(statement, delayed_queue, _KEY_INDEX if by_key else _DUE_INDEX)
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
    condition) after `position`, read as two ranges (sql.ListReads.split): the rest
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
def _history_statement(
    reads: sql.ListReads, *, key: bool, outcome: bool, before: bool
) -> Select[Any]:
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
    reads: sql.ListReads,
    pair: tuple[ColumnElement[Any], ColumnElement[Any]],
    position: tuple[Any, Any],
    *,
    newest: bool = False,
) -> ColumnElement[bool]:
    """The rows after `position` in the order of `pair` (ascending; descending when
    `newest`): a row comparison, or written out where the dialect's planner reads no
    range from one (sql.ListReads)."""
    (first, second), (at, at_id) = pair, position
    if not reads.expanded:
        rows, bound = tuple_(first, second), tuple_(at, at_id)
        return rows < bound if newest else rows > bound
    if newest:
        return or_(first < at, and_(first == at, second < at_id))
    return or_(first > at, and_(first == at, second > at_id))


def _forcing(statement: Select[Any], table: Table, index: str) -> Select[Any]:
    """`statement` reading `table` by `index` only (MariaDB's FORCE INDEX; sql.ListReads)."""
    assert index in {found.name for found in table.indexes}, index
    return statement.with_hint(table, f"FORCE INDEX ({index})")
