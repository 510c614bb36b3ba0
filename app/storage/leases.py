"""Leases: acknowledge, extend and release what a lock holds (all of it, or some of its
keys), alone or shared with the callers that arrive meanwhile; the poll that leases
messages (polls.py) and dead letters and redrive (dead_letters.py) are reached through
this room too."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from app.domain.messages import (
    Claim,
    Claimed,
    Finish,
    QueueFilter,
    QueueSettings,
    Redrive,
    every_queue,
)
from app.storage.coalescing import PATIENCE_SECONDS, Coalesced
from app.storage.connection import Connection
from app.storage.dead_letters import DeadLetters
from app.storage.dialects import Dialect
from app.storage.dialects.base import LockAcknowledgement
from app.storage.history import Removals
from app.storage.polls import Polls
from app.storage.runner import Runner

T = TypeVar("T")


class SqlLeases:
    """Messages leased to workers, by lock id."""

    def __init__(
        self, runner: Runner, dialect: Dialect, removals: Removals, dead_letters: DeadLetters
    ) -> None:
        self.runner = runner
        self.dialect = dialect
        self.removals = removals
        self.statements = dialect.statements.leases
        self.polls = Polls(runner, dialect, dead_letters)
        self.dead_letters = dead_letters
        # Acknowledgements and releases that arrive while one of their kind runs share the
        # next statement (decision 23): of whole locks (counted, or with the keys deleted),
        # by key, and releases of whole locks due at one time.
        self._acknowledged_counts = _per_queue(self._count_together, self._count_alone)
        self._acknowledged_locks = _per_queue(self._acknowledge_together, self._acknowledge_alone)
        self._acknowledged_keys = _per_queue(self._acknowledge_together, self._acknowledge_alone)
        self._released = Coalesced(
            self._release_together,
            self._release_alone,
            lambda release: release[0],
            PATIENCE_SECONDS,
        )

    async def poll(
        self,
        queue: str,
        limit: int,
        lock_id: str,
        lease_until: int,
        now: int,
        settings: QueueSettings | None = None,
        *,
        max_bytes: int | None = None,
        clock: Callable[[], int] | None = None,
    ) -> Claim:
        """Lease up to `limit` due messages to `lock_id` until `lease_until` (Polls.poll)."""
        return await self.polls.poll(
            queue, limit, lock_id, lease_until, now, settings, max_bytes=max_bytes, clock=clock
        )

    async def give_back(self, queue: str, lock_id: str, claimed: Sequence[Claimed]) -> int:
        """Undo a claim for rows nobody received (Polls.give_back); how many went back."""
        return await self.polls.give_back(queue, lock_id, claimed)

    async def redrive(
        self,
        queue: str,
        to: str | None,
        limit: int,
        now: int,
        may_use: QueueFilter = every_queue,
    ) -> Redrive:
        """Move up to `limit` dead letters back (DeadLetters.redrive)."""
        return await self.dead_letters.redrive(queue, to, limit, now, may_use)

    async def acknowledge(self, queue: str, lock_id: str, now: int) -> int:
        """Delete what `lock_id` still holds; how many messages that was."""
        return await self._acknowledged_counts(LockAcknowledgement(queue, lock_id, now))

    async def acknowledge_keys_of_lock(self, queue: str, lock_id: str, now: int) -> list[str]:
        """`acknowledge`, answering the keys deleted (a lock holds at most 1000 messages,
        as many as one removal of keys may name): what a poll's acknowledgement of a whole
        lock answers."""
        return await self._acknowledged_locks(LockAcknowledgement(queue, lock_id, now))

    async def acknowledge_keys(
        self, queue: str, lock_id: str, keys: Sequence[str], now: int
    ) -> list[str]:
        """Delete those of `keys` (at most 1000) that `lock_id` still holds, recorded as
        acknowledged like a whole lock's; the keys deleted. The others stay as they are."""
        return await self._acknowledged_keys(LockAcknowledgement(queue, lock_id, now, tuple(keys)))

    async def _count_alone(self, acknowledgement: LockAcknowledgement) -> int:
        return await self.removals.remove(
            self.statements.lock_acknowledge,
            {"queue": acknowledgement.queue, "lock_id": acknowledgement.lock_id},
            acknowledgement.now,
            Finish.ACKNOWLEDGED,
        )

    async def _count_together(self, acknowledgements: Sequence[LockAcknowledgement]) -> list[int]:
        return [len(keys) for keys in await self._acknowledge_together(acknowledgements)]

    async def _acknowledge_alone(self, acknowledgement: LockAcknowledgement) -> list[str]:
        removal, parameters = self.dialect.acknowledging(acknowledgement)
        return await self.removals.remove_keys(
            removal, parameters, acknowledgement.now, Finish.ACKNOWLEDGED
        )

    async def _acknowledge_together(
        self, acknowledgements: Sequence[LockAcknowledgement]
    ) -> list[list[str]]:
        """Many callers' acknowledgements in one go; for each, in order, the keys deleted."""

        async def acknowledge(connection: Connection) -> list[list[str]]:
            return await self.dialect.acknowledge_locks(
                connection, acknowledgements, self.removals.record
            )

        return await self.runner.shared(acknowledge)

    async def extend(self, queue: str, lock_id: str, until: int) -> int:
        """Move the lease of what `lock_id` holds to end at `until`."""
        return await self.runner.single(
            self.statements.lock_extend, {"queue": queue, "lock_id": lock_id, "until": until}
        )

    async def extend_within_limits(
        self, queue: str, lock_id: str, lease_ms: int, clock: Callable[[], int]
    ) -> tuple[int | None, int]:
        """`extend` in a queue with `max_leased`: it takes its turn with the queue's claims,
        and makes leased again what `lock_id` holds whose lease has run out only while the
        limit, as stored now, has room for it. How many messages it extended (None: their
        lease ran out and there is no room for them, so nothing changed), and the new end.

        The time is read from `clock` once the turn is taken: a claim that went before
        counted this lease as run out only if it ended by the claim's time, which is no
        later than this one (docs/decisions/0026-concurrency-and-rate-limits.md)."""
        statements = self.statements

        async def extend(connection: Connection) -> tuple[int | None, int]:
            limits = (await connection.execute(statements.limits_lock, {"queue": queue})).first()
            now = clock()
            until = now + lease_ms
            held = {"queue": queue, "lock_id": lock_id, "until": until}
            if limits is not None and limits.maxLeased is not None:
                owned = {"queue": queue, "lock_id": lock_id}
                ends = (await connection.execute(statements.lock_lease_ends, owned)).scalars()
                lapsed = sum(1 for end in ends if end <= now)
                if lapsed:
                    counted = {"queue": queue, "now": now}
                    leased, _ = (
                        await connection.execute(statements.limits_leased, counted)
                    ).first()
                    if leased + lapsed > limits.maxLeased:
                        return None, until
            extended = await connection.execute(statements.lock_extend, held)
            return extended.rowcount, until

        return await self.runner.transaction(extend)

    async def release(self, queue: str, lock_id: str, at: int) -> int:
        """Give back what `lock_id` holds, due again at `at`."""
        return await self._released((queue, lock_id, at))

    async def _release_alone(self, release: tuple[str, str, int]) -> int:
        queue, lock_id, at = release
        return await self.runner.single(
            self.statements.lock_release, {"queue": queue, "lock_id": lock_id, "at": at}
        )

    async def _release_together(self, releases: Sequence[tuple[str, str, int]]) -> list[int]:
        """Many callers' releases in one go; for each, in order, how many it gave back."""

        async def release(connection: Connection) -> list[int]:
            return await self.dialect.release_locks(connection, releases)

        return await self.runner.shared(release)

    async def release_each(
        self,
        queue: str,
        lock_id: str,
        due: Callable[[int], int],
        keys: Sequence[str] | None = None,
    ) -> list[str]:
        """Give back what `lock_id` holds (of `keys`, at most 1000, or all of it), each
        message due again at `due(its deliveries)`; the keys given back.

        The rows are read and locked first, then written: a message's time depends on
        its own delivery count, which nothing can change while this holds the row
        (docs/decisions/0014-per-key-locks-and-retry-delays.md)."""
        held: dict[str, Any] = {"queue": queue, "lock_id": lock_id}
        if keys is None:
            statement, parameters = self.statements.lock_held_rows, held
        else:
            statement, parameters = self.statements.keyed_locks.held, {**held, "keys": list(keys)}

        async def release(connection: Connection) -> list[str]:
            rows = (await connection.execute(statement, parameters)).all()
            times = {}
            for row in rows:
                at = due(row.deliveries)
                # A release must read as a redelivery (see leases' lock_release).
                times[row.id] = at - 1 if at == row.scheduledAtInitially else at
            await self.dialect.release_due(connection, held, times)
            return [row.pKey for row in rows]

        return await self.runner.transaction(release)


def _per_queue(
    together: Callable[[Sequence[LockAcknowledgement]], Awaitable[Sequence[T]]],
    alone: Callable[[LockAcknowledgement], Awaitable[T]],
) -> Coalesced[LockAcknowledgement, T]:
    """Acknowledgements of one queue go together: a queue whose rows are locked holds back
    no other's (and, past its patience, none of its own)."""
    return Coalesced(together, alone, lambda each: each.queue, PATIENCE_SECONDS)
