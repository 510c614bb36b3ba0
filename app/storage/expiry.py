"""The expiry sweep: messages whose expiry has passed leave their queue, to its
dead-letter queue (shown `"expired": true`) when it has one, else removed, recorded in
the history as expired either way (docs/decisions/0028-expiry.md)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

from app.domain.messages import DEAD_LETTER_SUFFIX, Finish, Swept
from app.storage.connection import Connection
from app.storage.dead_letters import DeadLetters
from app.storage.dialects import Dialect
from app.storage.history import Removals
from app.storage.runner import Runner


class SqlExpiry:
    """Expired messages, swept by any replica: each sweep locks the rows it takes and skips
    those another transaction holds, so two replicas never take one message."""

    def __init__(
        self, runner: Runner, dialect: Dialect, removals: Removals, dead_letters: DeadLetters
    ) -> None:
        self.runner = runner
        self.statements = dialect.statements.leases.expiry
        self.removals = removals
        self.dead_letters = dead_letters

    async def expire(self, now: int, limit: int) -> Swept:
        """Move or remove up to `limit` messages whose expiry is at or before `now`, the
        earliest first, in one transaction; how many left each queue. A sweep with nothing
        to do reads once, in autocommit (no transaction stays open between sweeps)."""
        if await self.runner.scalar(self.statements.due, {"now": now}) is None:
            return Swept()

        async def sweep(connection: Connection) -> Swept:
            return await self._sweep(connection, now, limit)

        return await self.runner.transaction_over_keys(sweep, "expiring messages")

    async def _sweep(self, connection: Connection, now: int, limit: int) -> Swept:
        candidates = {"now": now, "limit": limit}
        ids_of: dict[str, list[int]] = defaultdict(list)
        for row in await connection.execute(self.statements.candidates, candidates):
            ids_of[row.pKind].append(row.id)
        if not ids_of:
            return Swept()
        queues = sorted(ids_of)
        settings = await connection.execute(self.statements.dead_letter_queues, {"queues": queues})
        dead_letter_queue_of = {row.queue: _dead_letter_queue(row) for row in settings}
        expired: dict[str, int] = {}
        moved_to: set[str] = set()
        for queue in queues:
            ids = ids_of[queue]
            dead_letter_queue = dead_letter_queue_of.get(queue)
            gone = 0
            if dead_letter_queue is not None:
                dead_lock_id = str(uuid.uuid4())
                held = {"ids": ids, "dead_lock_id": dead_lock_id}
                await connection.execute(self.statements.hold, held)
                gone = await self.dead_letters.move(
                    connection, queue, dead_lock_id, dead_letter_queue, now, expired=True
                )
                if gone:
                    moved_to.add(dead_letter_queue)
            # Those not moved (no dead-letter queue; or a worker holds the message under
            # the same key there, which a dead letter would replace) are removed: they
            # leave now all the same, recorded as expired.
            if gone < len(ids):
                gone += await self.removals.remove_on(
                    connection,
                    self.statements.remove,
                    {"ids": ids, "queue": queue},
                    now,
                    Finish.EXPIRED,
                )
            if gone:
                expired[queue] = gone
        return Swept(sum(map(len, ids_of.values())), expired, frozenset(moved_to))


def _dead_letter_queue(settings: Any) -> str:
    """The dead-letter queue a queue's settings row gives (it has a delivery limit or names
    one): the one named, else `{queue}.dead`."""
    return settings.deadLetterQueue or settings.queue + DEAD_LETTER_SUFFIX
