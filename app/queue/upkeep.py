"""The queue's upkeep: redriving dead letters, pruning the history, sweeping expired messages,
and what the database tells of its schema and its tables."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from app.clock import Clock
from app.domain.messages import QueueFilter, Redrive, every_queue
from app.domain.table_health import TableHealth
from app.queue.groups import GroupKeeper
from app.queue.notifier import Notifier
from app.queue.ports import QueueEvents, QueueStorage
from app.queue.settings import check_allowed
from app.storage.calls import StorageCalls
from app.storage.schema import head_revision

# Expired messages a sweep moves or removes per transaction (docs/decisions/0028-expiry.md).
EXPIRY_SWEEP_BATCH = 500


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: str | None
    expected: str

    @property
    def ready(self) -> bool:
        return self.current == self.expected


class QueueUpkeep:
    """What keeps the queues in order besides the requests for their messages."""

    def __init__(
        self,
        storage: QueueStorage,
        calls: StorageCalls,
        notifier: Notifier,
        keeper: GroupKeeper,
        clock: Clock,
        events: QueueEvents,
    ) -> None:
        self.storage = storage
        self.calls = calls
        self.notifier = notifier
        self.keeper = keeper
        self.clock = clock
        self.events = events

    async def redrive(
        self, queue: str, to: str | None, limit: int, may_use: QueueFilter = every_queue
    ) -> Redrive:
        """Move dead letters of `queue` back (to `to`, or where each came from), due now.

        QueueForbidden when `may_use` refuses `to`; without `to`, a message whose origin
        it refuses stays, counted as forbidden: the others still move. A `to` naming
        `queue` itself moves nothing: every key is taken there, so every message is skipped.
        """
        if to is not None:
            check_allowed(may_use, to)
        redrive = await self.calls.run(
            partial(self.storage.leases.redrive, queue, to, limit, self.clock.now_ms(), may_use),
            queue,
        )
        if redrive.moved:
            if to is not None:
                self.notifier.notify(to)
            else:
                self.notifier.notify_every()
        return redrive

    async def prune_history(
        self, retention_ms: int, batch: int, stopping: Callable[[], bool] = lambda: False
    ) -> int:
        """Delete history rows older than the retention, in batches of about `batch`, each its
        own transaction; how many. Stops early when `stopping` says so."""
        before = self.clock.now_ms() - retention_ms
        pruned = 0
        while not stopping():
            deleted = await self.calls.run(partial(self.storage.history.prune, before, batch))
            pruned += deleted
            if deleted < batch:
                break
        return pruned

    async def expire(
        self, batch: int, stopping: Callable[[], bool] = lambda: False, *, once: bool = False
    ) -> int:
        """Sweep the messages whose expiry has passed, `batch` a transaction, until none is
        left (`once`: one transaction) (docs/decisions/0028-expiry.md); how many. Stops
        early when `stopping` says so."""
        expired = 0
        while not stopping():
            now = self.clock.now_ms()
            # Not one queue's call: the turns of no queue (no queue's name is empty).
            swept = await self.calls.run(partial(self.storage.expiry.expire, now, batch), "")
            for queue, count in swept.expired.items():
                self.events.expired(queue, count)
                self.keeper.changed(queue)  # a group's place may have come free
            for dead_letter_queue in swept.dead_letter_queues:
                self.notifier.notify(dead_letter_queue)
            expired += sum(swept.expired.values())
            if once or swept.found < batch:
                break
        return expired

    async def schema_status(self) -> SchemaStatus:
        """Whether the database answers at the schema this release needs."""
        current = await self.calls.run_readiness_check(self.storage.schema_revision)
        return SchemaStatus(current=current, expected=head_revision())

    async def table_health(self) -> TableHealth:
        """What the database tells of its upkeep of the message and history tables."""
        return await self.calls.run(self.storage.table_health.read)
