"""Polls: the claim that leases due messages to a lock (within the queue's limits, where
it has some), the payloads read after it, and a claim given back when its answer cannot be
made."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from app.domain.errors import StorageUnavailable
from app.domain.messages import (
    Claim,
    Claimed,
    Delivery,
    Limit,
    Message,
    QueueSettings,
)
from app.domain.trace import Trace
from app.storage import claims
from app.storage.connection import Connection
from app.storage.dead_letters import DeadLetters
from app.storage.dialects import Dialect
from app.storage.runner import Runner

log = logging.getLogger(__name__)

# How long a poll holds messages it found past their delivery limit, should
# moving them to the dead-letter queue fail: then a later poll tries again.
_DEAD_LETTER_HOLD_MS = 30_000
# A poll's bound in answer bytes when it has none (any sum of a poll's sizes is smaller).
_UNBOUNDED = 2**62


class Polls:
    """Due messages leased to a lock by a poll, highest priority first."""

    def __init__(self, runner: Runner, dialect: Dialect, dead_letters: DeadLetters) -> None:
        self.runner = runner
        self.dialect = dialect
        self.dead_letters = dead_letters
        self.statements = dialect.statements.leases

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
        oldest due (then lowest id), while what they add to the answer
        (claims.message_bytes) fits in `max_bytes` (the first always; None: no bound).
        Messages left out are not touched.

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
                dead_lettered = await self.dead_letters.after_poll(
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
        taken (as the extension's do: leases.py, extend_within_limits): _read_the_time."""
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
            trace=Trace.of_stored(row.trace),
        ),
        redelivery=row.previous_scheduled_at != row.scheduled_at_initially,
    )
