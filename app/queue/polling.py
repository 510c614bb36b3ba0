"""A poll's looks for due messages: one, or for a long poll, again on each wake-up until one
claims or its wait ends, holding no database connection while it waits on the Notifier."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from functools import partial

from app.clock import Clock
from app.domain.messages import Claim, Claimed, Lease, Limit, QueueSettings
from app.queue.groups import GroupKeeper
from app.queue.notifier import Notifier
from app.queue.ports import QueueEvents, QueueStorage
from app.queue.settings import PAUSE_CACHE_SECONDS, QueueSettingsService
from app.queue.upkeep import EXPIRY_SWEEP_BATCH, QueueUpkeep
from app.storage.calls import StorageCalls

# When a poll finds due messages that other polls hold (SKIP LOCKED), they are
# usually released within milliseconds; look again after this long.
_HELD_BY_OTHERS_RECHECK_SECONDS = 0.01
# A waiting poll held back by a limit looks again when the limit has room by time (a lease
# runs out, the rate's window moves on), but no sooner than this: a time already past
# (written by a replica whose clock is ahead) makes no busy loop.
_ROOM_RECHECK_SECONDS = 0.005
# Looks in a row that may find only messages to dead-letter before a poll answers.
_DEAD_LETTER_LOOKS = 10


@dataclass(frozen=True, slots=True)
class Look:
    """What one look of a poll found: a lease or None, the delivered rows as they were,
    and the queue limit that held it back, with when that limit has room by time alone."""

    lease: Lease | None
    before: tuple[Claimed, ...]
    held_back_by: Limit | None = None
    room_at: int | None = None


class Poller:
    """Claims a poll's messages under a new lock, waiting for them when the poll may wait."""

    def __init__(
        self,
        storage: QueueStorage,
        calls: StorageCalls,
        notifier: Notifier,
        keeper: GroupKeeper,
        clock: Clock,
        events: QueueEvents,
        settings: QueueSettingsService,
        upkeep: QueueUpkeep,
        *,
        max_poll_bytes: int,
        poll_recheck_seconds: float,
    ) -> None:
        """`settings` tells whether a queue is paused; `upkeep` sweeps expired messages a
        waiting poll finds due."""
        self.storage = storage
        self.calls = calls
        self.notifier = notifier
        self.keeper = keeper
        self.clock = clock
        self.events = events
        self.settings = settings
        self.upkeep = upkeep
        self.max_poll_bytes = max_poll_bytes
        self.poll_recheck_seconds = poll_recheck_seconds

    async def poll(
        self,
        queue: str,
        settings: QueueSettings,
        limit: int,
        lease_ms: int,
        wait_seconds: float,
        abandoned: Callable[[], Awaitable[bool]] | None,
    ) -> Lease | None:
        """Lease up to `limit` due messages for `lease_ms`; with a wait, until one is due or
        the wait ends, asking `abandoned` before every later look."""
        if wait_seconds <= 0:
            if await self.settings.paused(queue):
                return None
            look = await self.look(queue, settings, limit, lease_ms)
            self._held_back(queue, look)
            return look.lease
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        held_back: Limit | None = None
        with self.notifier.subscription(queue):
            first_look, woken = True, False
            while True:
                ticket = self.notifier.ticket(queue)
                # The caller is asked before each look after a wake-up, and after any
                # look that claimed something.
                if not first_look and abandoned is not None and await abandoned():
                    return None
                first_look = False
                paused, woken = await self.settings.paused(queue, woken=woken), False
                if paused:
                    # Nothing to look for: wait for its resume (a wake-up, or the next
                    # read of its pause), to the end of the wait. A wake-up may be a
                    # resume through another replica: the next read goes to the database.
                    remaining = deadline - loop.time()
                    if remaining <= 0 or self.notifier.closed:
                        return None
                    await self.notifier.wait(ticket, min(remaining, PAUSE_CACHE_SECONDS))
                    woken = ticket.is_set()
                    continue
                look = await self.look(queue, settings, limit, lease_ms)
                lease = look.lease
                if look.held_back_by is not None and held_back is None:
                    held_back = look.held_back_by
                    self._held_back(queue, look)  # once per poll, however many looks
                if lease is not None and abandoned is not None and await abandoned():
                    # The caller hung up while this look claimed (a worker stopping cuts
                    # its waiting poll short): give the messages back as they were, now,
                    # rather than leave them leased to nobody until the lease ends with
                    # a delivery counted that nobody received.
                    lock_id = lease.lock_id
                    await self.calls.run(
                        partial(self.storage.leases.give_back, queue, lock_id, look.before), queue
                    )
                    self.notifier.notify(queue)
                    return None
                remaining = deadline - loop.time()
                if lease is not None or remaining <= 0 or self.notifier.closed:
                    return lease
                timeout = min(remaining, self.poll_recheck_seconds)
                if look.held_back_by is not None:
                    # Due messages wait for room: a lease ending (acknowledged, released or
                    # run out) or the rate's window moving on. Wake for the first; look
                    # again at the second's time (docs/guide/flow-control.md).
                    if look.room_at is not None:
                        until_room = (look.room_at - self.clock.now_ms()) / 1000
                        timeout = min(timeout, max(until_room, _ROOM_RECHECK_SECONDS))
                    await self.notifier.wait(ticket, timeout)
                    continue
                next_due = await self.calls.run(
                    partial(self.storage.messages.next_due, queue), queue
                )
                # Due, yet not taken: held by another transaction, or expired and not yet
                # swept. Sweep now rather than look again and again until the sweep comes
                # (docs/decisions/0028-expiry.md); if it took any, look again.
                due_now = next_due is not None and next_due <= self.clock.now_ms()
                if due_now and await self.upkeep.expire(EXPIRY_SWEEP_BATCH, once=True):
                    continue
                if next_due is not None:
                    until_due = (next_due - self.clock.now_ms()) / 1000
                    timeout = min(timeout, max(until_due, _HELD_BY_OTHERS_RECHECK_SECONDS))
                await self.notifier.wait(ticket, timeout)

    def _held_back(self, queue: str, look: Look) -> None:
        if look.held_back_by is not None:
            self.events.held_back(queue, look.held_back_by)

    async def look(self, queue: str, settings: QueueSettings, limit: int, lease_ms: int) -> Look:
        """A look: a lease of up to `limit` due messages (or None), with the delivered rows
        as they were before (to give them back), and the limit that held it back."""
        for _ in range(_DEAD_LETTER_LOOKS):
            now = self.clock.now_ms()
            lock_id = str(uuid.uuid4())
            expires_at = now + lease_ms
            claim: Claim = await self.calls.run(
                partial(
                    self.storage.leases.poll,
                    queue,
                    limit,
                    lock_id,
                    expires_at,
                    now,
                    settings,
                    max_bytes=self.max_poll_bytes,
                    clock=self.clock.now_ms,
                ),
                queue,
            )
            if claim.dead_lettered:
                self.events.dead_lettered(queue, claim.dead_lettered)
                self.notifier.notify(settings.effective_dead_letter_queue)
                self.keeper.changed(queue)
            if any(delivery.message.group is not None for delivery in claim.deliveries):
                self.keeper.saw_groups(queue)
            held_back = (claim.held_back_by, claim.room_at)
            if claim.deliveries:
                lease = Lease(lock_id, claim.lease_until, tuple(claim.deliveries))
                return Look(lease, claim.before, *held_back)
            if not claim.exhausted:
                return Look(None, (), *held_back)
            # Everything due it found was past its limit: more may be due behind.
        return Look(None, ())
