"""Messages: offers (one, or a batch: offers.py), reading and deleting one by key, a
queue's stats and next due time, and purging a queue."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.domain.messages import (
    Message,
    Offer,
    OfferOutcome,
    Outcome,
    QueueFilter,
    QueueStats,
    every_queue,
    shown_priority,
)
from app.domain.trace import Trace
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.history import Removals
from app.storage.inserts import Inserts
from app.storage.offers import Offers
from app.storage.runner import Runner


class SqlMessages:
    """Messages by key, and by queue."""

    def __init__(
        self, runner: Runner, dialect: Dialect, removals: Removals, inserts: Inserts
    ) -> None:
        self.runner = runner
        self.dialect = dialect
        self.removals = removals
        self.statements = dialect.statements.messages
        self.offers = Offers(runner, dialect, inserts)

    async def offer(
        self,
        queue: str,
        offer: Offer,
        now: int,
        *,
        can_create: bool = True,
        may_use: QueueFilter = every_queue,
    ) -> OfferOutcome | None:
        """Create, update or ignore one message; None when `can_create` is off and it is
        missing (Offers.offer)."""
        return await self.offers.offer(queue, offer, now, can_create=can_create, may_use=may_use)

    async def offer_many(
        self, queue: str, offers: Sequence[Offer], now: int, may_use: QueueFilter = every_queue
    ) -> list[Outcome]:
        """Offer many messages; outcomes in input order (Offers.offer_many)."""
        return await self.offers.offer_many(queue, offers, now, may_use)

    async def offer_bulk(
        self, queue: str, offers: Sequence[Offer], now: int, may_use: QueueFilter = every_queue
    ) -> list[Outcome]:
        """offer_many for bulk loads, the import (Offers.offer_bulk)."""
        return await self.offers.offer_bulk(queue, offers, now, may_use)

    async def get(self, queue: str, key: str) -> Message | None:
        """The message under `key`, or None."""
        row = await self.runner.first(self.statements.message_get, {"queue": queue, "key": key})
        return None if row is None else message_of(queue, row, row.payload)

    async def delete(self, queue: str, key: str, now: int) -> bool:
        """Delete the message under `key`, leased or not; False when there was none."""
        parameters = {"queue": queue, "key": key}
        return await self.removals.remove(self.statements.message_delete, parameters, now) > 0

    async def next_due(self, queue: str) -> int | None:
        """The earliest `scheduledAt` in the queue (a due message or a lease that ends), or None."""
        return await self.runner.scalar(self.statements.queue_next_due, {"queue": queue})

    async def stats(self, queue: str, now: int) -> QueueStats:
        """Counts by state (zeros for a queue that holds nothing), and since when it has
        been paused."""
        paused = self.dialect.statements.settings.pause_select

        async def read(connection: Connection) -> tuple[Any, int | None]:
            parameters = {"queue": queue, "now": now}
            return (
                (await connection.execute(self.statements.queue_stats, parameters)).first(),
                (await connection.execute(paused, {"queue": queue})).scalar(),
            )

        row, paused_at = await self.runner.read(read)
        return _stats(row, queue, paused_at)

    async def all_stats(self, now: int) -> list[QueueStats]:
        """Stats of every queue that holds messages or cron entries, or is paused, by name."""
        with_entries = self.dialect.statements.cron.cron_queues
        paused = self.dialect.statements.settings.pauses_select

        async def read(connection: Connection) -> tuple[Sequence[Any], set[str], dict[str, int]]:
            return (
                (await connection.execute(self.statements.queues_stats, {"now": now})).all(),
                set((await connection.execute(with_entries, {})).scalars().all()),
                {row.queue: row.pausedAt for row in await connection.execute(paused, {})},
            )

        rows, cron_queues, pauses = await self.runner.read(read)
        counted = {row.pKind: row for row in rows}
        return [
            _stats(counted.get(queue), queue, pauses.get(queue))
            for queue in sorted(counted.keys() | cron_queues | pauses.keys())
        ]

    async def purge(self, queue: str, now: int) -> int:
        """Delete every message of the queue; how many there were (in pages, one
        transaction still: see Removals.remove_all)."""
        return await self.removals.remove_all(self.statements.queue_purge, {"queue": queue}, now)


def message_of(queue: str, row: Any, payload: bytes) -> Message:
    """The Message of a row that has messages' MESSAGE_COLUMNS (app/storage/statements)."""
    return Message(
        queue=queue,
        key=row.pKey,
        payload=payload,
        scheduled_at=row.scheduledAt,
        scheduled_at_initially=row.scheduledAtInitially,
        created_at=row.createdAt,
        locked=bool(row.locked),
        deliveries=row.deliveries,
        dead_lettered_from=row.deadLetteredFrom,
        priority=shown_priority(row.priority),
        group=row.messageGroup,
        expires_at=row.expiresAt,
        expired=bool(row.expired),
        trace=Trace.of_stored(row.trace),
    )


def _stats(row: Any, queue: str, paused_at: int | None) -> QueueStats:
    """The stats of `queue` from its row of counts (None: it holds nothing)."""
    if row is None:
        return QueueStats(queue, 0, 0, 0, 0, None, None, paused_at)
    return QueueStats(
        queue=queue,
        messages=row.messages,
        ready=row.ready,
        scheduled=row.scheduled,
        leased=row.leased,
        oldest_ready_at=row.oldest_ready_at,
        next_scheduled_at=row.next_scheduled_at,
        paused_at=paused_at,
    )
