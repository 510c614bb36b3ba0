"""Lists: a queue's messages a page at a time (by due time, or by key prefix in key
order, of one state or all) and its delivery history, newest first
(docs/guide/messages.md tells what a list shows).

Every page is a keyset read: an index leads to the first row after the cursor
(decision 13), so a page costs what its rows cost, whatever the queue's size. Its
statements, built once per combination of filters, are app/storage/statements/lists.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.sql import Select

from app.domain.messages import Finish
from app.domain.pages import (
    MAX_CURSOR_LENGTH,
    DuePosition,
    HistoryEntry,
    HistoryPage,
    HistoryPosition,
    KeyPosition,
    ListState,
    MessagePage,
    key_prefix_end,
)
from app.storage import claims
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.messages import message_of
from app.storage.runner import Runner
from app.storage.statements.leases import PAYLOAD_READ_BYTES

# Bytes of a page's payloads read with its rows; larger ones are read after, by id, in
# results of about this size (as a poll reads them: leases' PAYLOAD_READ_BYTES).
_INLINE_BYTES = PAYLOAD_READ_BYTES
# A page's bound in payload bytes when it has none.
_UNBOUNDED = 2**62
# What a page's answer holds besides its messages, at most: `{"messages":[…],"next":"…"}`
# with the longest cursor. Its messages are counted as a poll's (claims.message_bytes).
PAGE_ENVELOPE_BYTES = MAX_CURSOR_LENGTH + 32


class SqlLists:
    """Pages of messages and of history."""

    def __init__(self, runner: Runner, dialect: Dialect) -> None:
        self.runner = runner
        self.dialect = dialect
        self.statements = dialect.statements.lists

    async def messages(
        self,
        queue: str,
        *,
        state: ListState = ListState.ALL,
        prefix: str | None = None,
        group: str | None = None,
        after: DuePosition | KeyPosition | None = None,
        limit: int,
        now: int,
        max_bytes: int | None = None,
    ) -> MessagePage:
        """Up to `limit` messages after `after`: by due time then id, or with `prefix` (a
        key prefix, every character literal) by key; of one `group` only, when given. A
        page stops early where its answer, next cursor included, would pass `max_bytes`
        (the first message always)."""
        by_key = bool(prefix)
        statement, parameters = self.messages_query(
            queue, state=state, prefix=prefix, group=group, after=after, limit=limit, now=now
        )

        rows = await self.runner.rows(statement, parameters)
        more = len(rows) > limit
        rows = rows[:limit]
        sizes = [claims.message_bytes(row.payload_bytes, row.trace) for row in rows]
        bound = _UNBOUNDED if max_bytes is None else max_bytes - PAGE_ENVELOPE_BYTES
        fitting = claims.answer_length(sizes, bound)
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
        group: str | None = None,
        after: DuePosition | KeyPosition | None = None,
        limit: int,
        now: int,
    ) -> tuple[Select[Any], dict[str, Any]]:
        """The SELECT of `messages`' page and its parameters (one row more than `limit`:
        whether there is a next page); bench/lists.py explains it."""
        by_key = bool(prefix)
        statement = self.statements.messages_page(
            self.statements.keys_by_bytes,
            self.statements.list_reads,
            by_key=by_key,
            state=state,
            after=after is not None,
            since=isinstance(after, DuePosition),
            bounded=by_key and key_prefix_end(prefix or "") is not None,
            grouped=group is not None,
        )
        parameters: dict[str, Any] = {
            "queue": queue,
            "now": now,
            "limit": limit + 1,  # one more: whether there is a next page
            "inline_payload_bytes": _INLINE_BYTES // (limit + 1),
        }
        if group is not None:
            parameters["group"] = group
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
            return await claims.read_payloads(
                connection, self.statements.payloads_by_id, sized, {"queue": queue}
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
        statement = self.statements.history_page(
            self.statements.list_reads,
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
