"""Leases: polls (the claim, payloads read after it, a claim given back, dead letters
held back and moved), redrive, and acknowledge, extend and release by lock id (what
the lock holds, or some of its keys)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar

from app.domain.errors import StorageUnavailable
from app.domain.messages import (
    Claim,
    Claimed,
    Delivery,
    Finish,
    Limit,
    Message,
    QueueFilter,
    QueueSettings,
    Redrive,
    every_queue,
)
from app.storage import claims
from app.storage.coalescing import PATIENCE_SECONDS, Coalesced
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.dialects.base import LockAcknowledgement
from app.storage.history import Removals
from app.storage.runner import Runner

log = logging.getLogger(__name__)

T = TypeVar("T")

# Dead letters moved back per transaction by a redrive.
_REDRIVE_CHUNK = 500
# How long a poll holds messages it found past their delivery limit, should
# moving them to the dead-letter queue fail: then a later poll tries again.
_DEAD_LETTER_HOLD_MS = 30_000
# A poll's bound in answer bytes when it has none (any sum of a poll's sizes is smaller).
_UNBOUNDED = 2**62


class SqlLeases:
    """Messages leased to workers, by lock id."""

    def __init__(self, runner: Runner, dialect: Dialect, removals: Removals) -> None:
        self.runner = runner
        self.dialect = dialect
        self.removals = removals
        self.statements = dialect.statements.leases
        # A dead letter replaces the message under its key (messages' message_delete).
        self.message_delete = dialect.statements.messages.message_delete
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
        """Lease up to `limit` due messages to `lock_id`, highest priority first, then
        oldest due (then lowest id), while their payloads with
        POLL_MESSAGE_ENVELOPE_BYTES each fit in `max_bytes` (the first always; None: no
        bound). Messages left out are not touched.

        With a delivery limit in `settings`, a due message already delivered that
        often goes to the dead-letter queue instead (see leases' claim_values in app/storage/statements).

        With `max_leased` or a `rate` in `settings`, the claim takes turns with every other
        claim of the queue and takes at most the room the limits leave (as stored now:
        docs/decisions/0026-concurrency-and-rate-limits.md); the Claim says which limit
        held it back, and when that limit has room again by time alone.

        Every claim reads the time from `clock` (when given) once it runs, with its
        connection and (with limits) its turn: one that waited judges expiry
        (docs/decisions/0028-expiry.md) and counts the rate's window, and starts its
        leases and deliveries, at the time it claims, not at `now` (the Claim's
        `lease_until` says when the leases end).
        """
        max_deliveries = settings.max_deliveries if settings else None
        parameters: dict[str, Any] = {
            "queue": queue,
            "now": now,
            "limit": limit,
            "lock_id": lock_id,
            "lease_until": lease_until,
            "max_bytes": _UNBOUNDED if max_bytes is None else max_bytes,
        }
        if max_deliveries is not None:  # the statement that checks the limit
            parameters["max_deliveries"] = max_deliveries
            parameters["dead_lock_id"] = str(uuid.uuid4())
            parameters["dead_hold_until"] = now + _DEAD_LETTER_HOLD_MS
        held_back: tuple[Limit | None, int | None] = (None, None)
        if settings is not None and settings.limited:

            async def limited(
                connection: Connection,
            ) -> tuple[list[claims.ClaimedRow], tuple[Limit | None, int | None]]:
                return await self._claim_within_limits(
                    connection, parameters, max_deliveries, clock
                )

            claimed, held_back = await self.runner.transaction(limited)
        else:
            run = (
                self.runner.autocommit
                if self.dialect.claims_in_one_statement
                else self.runner.transaction
            )

            async def claim(connection: Connection) -> list[claims.ClaimedRow]:
                _read_the_time(parameters, clock)
                return await self.dialect.claim(connection, parameters)

            claimed = await run(claim)
        try:
            claimed = await self._with_payloads(claimed, lock_id, max_deliveries)
        except StorageUnavailable:
            # The poll answers 503: nobody may be left holding what it took.
            await self._give_back(queue, claimed, lock_id, max_deliveries)
            raise
        # The claim's order (leases' CLAIM_ORDER), which not every statement keeps.
        claimed.sort(key=lambda row: (-row.priority, row.previous_scheduled_at, row.id))
        deliveries = [
            _delivery(queue, row, parameters["lease_until"])
            for row in claimed
            if row.delivered(max_deliveries)
        ]
        dead_lettered = 0
        if len(deliveries) < len(claimed):
            assert settings is not None
            try:
                dead_lettered = await self._dead_letter(
                    queue, parameters["dead_lock_id"], settings, parameters["now"]
                )
            except StorageUnavailable as error:
                # The deliveries stand; the held rows come back when the hold ends.
                log.warning("dead-lettering in %r failed, tried again later: %s", queue, error)
        before = tuple(_before(row) for row in claimed if row.delivered(max_deliveries))
        return Claim(
            deliveries,
            parameters["lease_until"],
            dead_lettered,
            exhausted=len(claimed) - len(deliveries),
            before=before,
            held_back_by=held_back[0],
            room_at=held_back[1],
        )

    async def _claim_within_limits(
        self,
        connection: Connection,
        parameters: dict[str, Any],
        max_deliveries: int | None,
        clock: Callable[[], int] | None,
    ) -> tuple[list[claims.ClaimedRow], tuple[Limit | None, int | None]]:
        """The claim of a queue with limits, in its transaction: the settings row locked
        (claims of the queue take turns), the room each limit leaves counted, at most that
        claimed, and the deliveries begun written to the rate's ledger. With the rows, the
        limit that held the claim back (it took all the room it had, less than asked) and
        when that limit has room again by time alone (None: only when a lease ends early).

        With a `clock`, the times in `parameters` move on to its reading once the turn is
        taken (as the extension's do: extend_within_limits): _read_the_time."""
        statements = self.statements
        queue, asked = parameters["queue"], parameters["limit"]
        limits = (await connection.execute(statements.limits_lock, {"queue": queue})).first()
        _read_the_time(parameters, clock)
        now = parameters["now"]
        if limits is None:  # its settings went since they were read: no limits now
            return await self.dialect.claim(connection, parameters), (None, None)
        # Each limit's room and when it grows by time alone (None: only by an
        # acknowledgement or a release): the claim takes the smallest.
        rooms: list[tuple[int, Limit, int | None]] = []
        if limits.maxLeased is not None:
            leased, first_end = (
                await connection.execute(statements.limits_leased, {"queue": queue, "now": now})
            ).first()
            rooms.append((max(0, limits.maxLeased - leased), Limit.MAX_LEASED, first_end))
        window = None
        if limits.rateLimit is not None:
            window = {"queue": queue, "window_start": now - limits.ratePeriodMs}
            started, oldest = (await connection.execute(statements.limits_started, window)).first()
            # An empty window fills with this claim's own deliveries, begun now.
            frees_at = (now if oldest is None else oldest) + limits.ratePeriodMs
            rooms.append((max(0, limits.rateLimit - int(started)), Limit.RATE, frees_at))
        room = min([asked, *(left for left, _, _ in rooms)])
        claimed = (
            await self.dialect.claim(connection, {**parameters, "limit": room}) if room else []
        )
        if window is not None:
            begun = sum(1 for row in claimed if row.delivered(max_deliveries))
            if begun:
                await connection.execute(
                    statements.limits_started_insert,
                    {"queue": queue, "startedAt": now, "deliveries": begun},
                )
            await connection.execute(statements.limits_started_prune, window)
        if room == asked or len(claimed) < room:
            return claimed, (None, None)  # it took all it found: no limit held it back
        # The limits that left the least room: it grows once each of them has more.
        binding = [(limit, at) for left, limit, at in rooms if left == room]
        times = [at for _, at in binding if at is not None]
        return claimed, (binding[0][0], max(times) if len(times) == len(binding) else None)

    async def _with_payloads(
        self, claimed: list[claims.ClaimedRow], lock_id: str, max_deliveries: int | None
    ) -> list[claims.ClaimedRow]:
        """`claimed` with the payloads the claim left out read, after it committed: the
        rows it left out of the answer are then free again for other polls. A message
        updated or deleted in between is no longer the lock's, and is left out."""
        missing = [row for row in claimed if row.payload is None and row.delivered(max_deliveries)]
        if not missing:
            return claimed
        sized = [(row.id, row.payload_bytes) for row in missing]

        async def payloads_of(connection: Connection) -> dict[int, bytes]:
            return await claims.read_payloads(
                connection, self.statements.claimed_payloads, sized, {"lock_id": lock_id}
            )

        payloads = await self.runner.read(payloads_of)
        read = {row.id for row in missing}
        return [
            dataclasses.replace(row, payload=payloads[row.id]) if row.id in read else row
            for row in claimed
            if row.id not in read or row.id in payloads
        ]

    async def _give_back(
        self,
        queue: str,
        claimed: list[claims.ClaimedRow],
        lock_id: str,
        max_deliveries: int | None,
    ) -> None:
        """Undo, as far as the database allows now, a claim whose answer cannot be made:
        each delivered row its lock still holds is due when it was, held as it was (by
        nobody, or by the holder of a lease that ran out), with the delivery counts it
        had (so a message whose limit is one delivery is not dead-lettered for a
        delivery nobody received). A row to dead-letter stays
        held until its hold ends, as when dead-lettering fails.

        Best effort: the database just failed a read, and may fail this too. Then the
        rows stay leased under a lock no client knows until the lease runs out, with
        one delivery more counted (docs/decisions/0003-the-poll-statement.md).
        """
        delivered = [_before(row) for row in claimed if row.delivered(max_deliveries)]
        try:
            await self.give_back(queue, lock_id, delivered)
        except StorageUnavailable as error:
            log.warning(
                "a poll of %r could not give back the %d messages it leased and cannot "
                "answer; they come back when their lease ends: %s",
                queue,
                len(delivered),
                error,
            )

    async def give_back(self, queue: str, lock_id: str, claimed: Sequence[Claimed]) -> int:
        """Undo a claim for rows nobody received: each row of `claimed` the lock still holds
        goes back as it was before (due when it was, held as it was, its delivery counts
        as they were); how many did."""

        async def give_back(connection: Connection) -> int:
            given = 0
            for row in claimed:
                undone = await connection.execute(
                    self.statements.claim_give_back,
                    {
                        "claimed_id": row.id,
                        "lock_id": lock_id,
                        "previous_scheduled_at": row.scheduled_at,
                        "previous_lock_id": row.lock_id,
                        "previous_deliveries": row.deliveries,
                        "previous_first_delivered_at": row.first_delivered_at,
                        "previous_last_delivered_at": row.last_delivered_at,
                    },
                )
                given += undone.rowcount
            return given

        return await self.runner.transaction(give_back)

    async def _dead_letter(
        self, queue: str, dead_lock_id: str, settings: QueueSettings, now: int
    ) -> int:
        """Move what a poll held under `dead_lock_id` to the dead-letter queue; how many.

        A dead letter whose key the dead-letter queue already holds replaces the
        older one (recorded as dropped), unless a worker holds that one: then it
        stays held here until the hold ends, and a later poll tries again.
        """
        dead_letter_queue = settings.effective_dead_letter_queue

        async def move(connection: Connection) -> int:
            return await self.move_dead_letters(
                connection, queue, dead_lock_id, dead_letter_queue, now
            )

        return await self.runner.transaction_over_keys(move, f"dead-lettering in {queue!r}")

    async def move_dead_letters(
        self,
        connection: Connection,
        queue: str,
        dead_lock_id: str,
        dead_letter_queue: str,
        now: int,
        *,
        expired: bool = False,
    ) -> int:
        """`_dead_letter`'s move, in the caller's transaction, to `dead_letter_queue`;
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


def _read_the_time(parameters: dict[str, Any], clock: Callable[[], int] | None) -> None:
    """Move a claim's times in `parameters` on to `clock`'s reading (None: keep them), in
    place, so that the caller's deliveries and dead-letter hold follow: now, the leases'
    end and the hold's. A transaction run again moves them on by what it waited again."""
    if clock is None:
        return
    waited = max(0, clock() - parameters["now"])
    for time in ("now", "lease_until", "dead_hold_until"):
        if time in parameters:
            parameters[time] += waited


def _per_queue(
    together: Callable[[Sequence[LockAcknowledgement]], Awaitable[Sequence[T]]],
    alone: Callable[[LockAcknowledgement], Awaitable[T]],
) -> Coalesced[LockAcknowledgement, T]:
    """Acknowledgements of one queue go together: a queue whose rows are locked holds back
    no other's (and, past its patience, none of its own)."""
    return Coalesced(together, alone, lambda each: each.queue, PATIENCE_SECONDS)


def _before(row: claims.ClaimedRow) -> Claimed:
    return Claimed(
        row.id,
        row.previous_scheduled_at,
        row.previous_lock_id,
        row.previous_deliveries,
        row.previous_first_delivered_at,
        row.previous_last_delivered_at,
    )


def _delivery(queue: str, row: claims.ClaimedRow, lease_until: int) -> Delivery:
    """A delivered row as the worker receives it: leased until `lease_until`."""
    assert row.payload is not None  # read after the claim (_with_payloads), when left out
    return Delivery(
        message=Message(
            queue=queue,
            key=row.key,
            payload=row.payload,
            scheduled_at=lease_until,
            scheduled_at_initially=row.scheduled_at_initially,
            created_at=row.created_at,
            locked=True,
            deliveries=row.previous_deliveries + 1,
            dead_lettered_from=row.dead_lettered_from,
            priority=row.priority,
            group=row.group,
            expires_at=row.expires_at,
        ),
        redelivery=row.previous_scheduled_at != row.scheduled_at_initially,
    )
