"""Dead letters: what a poll found past its delivery limit moved to the dead-letter queue
(and what the expiry sweep moves there), and redrive, which moves dead letters back."""

from __future__ import annotations

from app.domain.messages import Finish, QueueFilter, QueueSettings, Redrive, every_queue
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.history import Removals
from app.storage.runner import Runner

# Dead letters moved back per transaction by a redrive.
_REDRIVE_CHUNK = 500


class DeadLetters:
    """Messages on their way to a dead-letter queue, and back from one."""

    def __init__(self, runner: Runner, dialect: Dialect, removals: Removals) -> None:
        self.runner = runner
        self.removals = removals
        self.statements = dialect.statements.leases
        # A dead letter replaces the message under its key (messages' message_delete).
        self.message_delete = dialect.statements.messages.message_delete

    async def after_poll(
        self, queue: str, dead_lock_id: str, settings: QueueSettings, now: int
    ) -> int:
        """Move what a poll held under `dead_lock_id` to the dead-letter queue; how many.

        A dead letter whose key the dead-letter queue already holds replaces the
        older one (recorded as dropped), unless a worker holds that one: then it
        stays held here until the hold ends, and a later poll tries again.
        """
        dead_letter_queue = settings.effective_dead_letter_queue

        async def dead_letter(connection: Connection) -> int:
            return await self.move(connection, queue, dead_lock_id, dead_letter_queue, now)

        return await self.runner.transaction_over_keys(dead_letter, f"dead-lettering in {queue!r}")

    async def move(
        self,
        connection: Connection,
        queue: str,
        dead_lock_id: str,
        dead_letter_queue: str,
        now: int,
        *,
        expired: bool = False,
    ) -> int:
        """`after_poll`'s move, in the caller's transaction, to `dead_letter_queue`;
        `expired`: the expiry sweep's (recorded as expired, and shown so), not a poll's."""
        held = {"queue": queue, "dead_lock_id": dead_lock_id}
        keys = (await connection.execute(self.statements.dead_letter_keys, held)).scalars().all()
        if not keys:
            return 0
        there_now = {"queue": dead_letter_queue, "keys": list(keys)}
        taken = (await connection.execute(self.statements.existing_keys, there_now)).scalars()
        waiting = set()
        for key in taken.all():
            there = {"queue": dead_letter_queue, "key": key}
            held_there = await connection.execute(
                self.statements.message_held, {**there, "now": now}
            )
            if held_there.scalar():
                waiting.add(key)
            else:
                await self.removals.remove_on(connection, self.message_delete, there, now)
        finish = Finish.EXPIRED if expired else Finish.DEAD_LETTERED
        moved = 0
        for key in keys:
            if key in waiting:
                continue
            parameters = {**held, "key": key, "dead_letter_queue": dead_letter_queue, "now": now}
            if self.removals.record:
                await connection.execute(
                    self.statements.dead_letter_record, {**parameters, "outcome": finish.value}
                )
            gone = await connection.execute(
                self.statements.dead_letter_move,
                {**parameters, "expired_at": now if expired else None},
            )
            moved += gone.rowcount
        return moved

    async def redrive(
        self,
        queue: str,
        to: str | None,
        limit: int,
        now: int,
        may_use: QueueFilter = every_queue,
    ) -> Redrive:
        """Move up to `limit` messages of a dead-letter queue back, as new messages due now:
        to `to`, or each to the queue it came from. A message whose key the target holds,
        or that came from no queue, stays (skipped); so does one whose target `may_use`
        refuses (forbidden). Each target is judged on the rows as locked for the move, so a
        dead letter cannot change its way back between the check and the move."""
        moved = skipped = forbidden = 0
        after = 0
        while moved < limit:
            chunk = min(_REDRIVE_CHUNK, limit - moved)

            async def redrive(
                connection: Connection, after: int = after, chunk: int = chunk
            ) -> tuple[Redrive, int, int]:
                rows = (
                    await connection.execute(
                        self.statements.redrive_candidates,
                        {"queue": queue, "now": now, "after": after, "limit": chunk},
                    )
                ).all()
                by_target: dict[str | None, list[str]] = {}
                for row in rows:
                    by_target.setdefault(to or row.deadLetteredFrom, []).append(row.pKey)
                moved = skipped = forbidden = 0
                for target, keys in by_target.items():
                    if target is None:
                        skipped += len(keys)
                        continue
                    if not may_use(target):
                        forbidden += len(keys)
                        continue
                    existing = await connection.execute(
                        self.statements.existing_keys, {"queue": target, "keys": keys}
                    )
                    taken = set(existing.scalars())
                    skipped += len(taken)
                    for key in keys:
                        if key not in taken:
                            went = await connection.execute(
                                self.statements.redrive_move,
                                {"queue": queue, "key": key, "target": target, "now": now},
                            )
                            moved += went.rowcount
                last = rows[-1].id if rows else after
                return Redrive(moved, skipped, forbidden), len(rows), last

            done, examined, after = await self.runner.transaction_over_keys(
                redrive, f"redriving {queue!r}"
            )
            moved += done.moved
            skipped += done.skipped
            forbidden += done.forbidden
            if examined < chunk:
                break
        return Redrive(moved, skipped, forbidden)
