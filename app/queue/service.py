"""The queue's rules over storage (its ports: app/queue/ports.py) and a Clock: offers, polls (long or not), leases, stats.

Storage calls go through StorageCalls, each on behalf of its queue, so that one queue
in trouble cannot take every connection. A long poll waits on
the Notifier, holding no database connection while it waits.
"""

from __future__ import annotations

import asyncio
import logging
import random
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from app.clock import Clock
from app.domain.errors import (
    InvalidSettings,
    LockNotFound,
    MessageNotFound,
    PurgeNotConfirmed,
    QueueForbidden,
    StorageUnavailable,
)
from app.domain.messages import (
    DEFAULT_PRIORITY,
    Claim,
    Claimed,
    KeyedOutcome,
    Lease,
    Limit,
    Message,
    Offer,
    OfferRequest,
    OfferResult,
    Outcome,
    PushTarget,
    QueueFilter,
    QueueSettings,
    QueueStats,
    RandomSource,
    Rate,
    Redrive,
    RetryPolicy,
    State,
    When,
    every_queue,
)
from app.domain.payloads import encode_payload
from app.domain.push import target_problem
from app.domain.table_health import TableHealth
from app.queue.groups import GroupKeeper
from app.queue.notifier import Notifier
from app.queue.ports import QueueEvents, QueueStorage, Unobserved
from app.queue.recent import Recent
from app.storage.calls import StorageCalls
from app.storage.schema import head_revision

T = TypeVar("T")

log = logging.getLogger(__name__)

# When a poll finds due messages that other polls hold (SKIP LOCKED), they are
# usually released within milliseconds; look again after this long.
_HELD_BY_OTHERS_RECHECK_SECONDS = 0.01
# Expired messages a sweep moves or removes per transaction (docs/decisions/0028-expiry.md).
EXPIRY_SWEEP_BATCH = 500
# A queue's settings are read from the database at most this often per process: a
# change made through another replica applies here within this many seconds.
SETTINGS_CACHE_SECONDS = 5.0
# The settings cache keeps only what it read in the last SETTINGS_CACHE_SECONDS, and
# at most this many queues (~300 bytes each, measured): polls of ever new queue
# names, one read each, leave nothing behind once they stop (app/queue/recent.py).
_SETTINGS_CACHE_SIZE = 10_000
# Whether a queue is paused is read at most this often per process: a pause or resume
# made through another replica applies here within this long, and a poll waiting on a
# paused queue looks again this often (docs/guide/flow-control.md: within a second, with room to spare).
PAUSE_CACHE_SECONDS = 0.25
# A poll of a paused queue that was woken (an offer, or on PostgreSQL a resume through
# another replica) trusts a read of the pause at most this old.
WOKEN_PAUSE_SECONDS = 0.02
# A waiting poll held back by a limit looks again when the limit has room by time (a lease
# runs out, the rate's window moves on), but no sooner than this: a time already past
# (written by a replica whose clock is ahead) makes no busy loop.
_ROOM_RECHECK_SECONDS = 0.005
# Looks in a row that may find only messages to dead-letter before a poll answers.
_DEAD_LETTER_LOOKS = 10
# Queue names are at most this long (the column's size).
QUEUE_NAME_MAX = 100


class QueueService:
    """Everything a client can ask of the queue, as async methods."""

    def __init__(
        self,
        storage: QueueStorage,
        calls: StorageCalls,
        notifier: Notifier,
        clock: Clock,
        *,
        default_lease_seconds: float,
        max_payload_bytes: int,
        max_poll_bytes: int,
        poll_recheck_seconds: float,
        events: QueueEvents | None = None,
        random_source: RandomSource | None = None,
        push_allowed: tuple[str, ...] = (),
    ) -> None:
        """`calls` runs `storage`'s methods; `notifier` wakes this process's long polls. The
        application builds and closes both (app/main.py), and shares them with cron.
        `random_source` spreads retry delays by their jitter (tests fix it, like the clock).
        `push_allowed`: the URL prefixes a push target must match (none: no push)."""
        self.storage = storage
        self.events: QueueEvents = events or Unobserved()
        self.clock = clock
        self.random: RandomSource = random_source or random.Random()
        self.default_lease_ms = round(default_lease_seconds * 1000)
        self.max_payload_bytes = max_payload_bytes
        self.max_poll_bytes = max_poll_bytes
        self.poll_recheck_seconds = poll_recheck_seconds
        self.notifier = notifier
        self.calls = calls
        self.push_allowed = push_allowed
        # Told of every queue's settings stored through this service (the push dispatcher
        # applies a change at once).
        self.settings_listeners: list[Callable[[QueueSettings], None]] = []
        self._settings: Recent[str, QueueSettings] = Recent(
            clock, SETTINGS_CACHE_SECONDS, _SETTINGS_CACHE_SIZE
        )
        # queue -> since when it is paused (None: it delivers); and how many pauses and
        # resumes this service has made, which tells a read they overtook.
        self._pauses: Recent[str, int | None] = Recent(
            clock, PAUSE_CACHE_SECONDS, _SETTINGS_CACHE_SIZE
        )
        self._pause_changes = 0
        self._pause_reads: dict[str, asyncio.Future[int | None]] = {}
        # Brings each group's next messages to its front (the application starts it).
        self.keeper = GroupKeeper(storage.groups, self._run, notifier, clock)

    # -- offers -------------------------------------------------------------------

    async def offer(
        self, queue: str, request: OfferRequest, may_use: QueueFilter = every_queue
    ) -> OfferResult:
        """Create the message, or update or ignore it when its key exists. An update keeps
        a dead letter's origin only when `may_use` allows that queue."""
        return await self._offer(queue, request, can_create=True, may_use=may_use)

    async def update(
        self, queue: str, request: OfferRequest, may_use: QueueFilter = every_queue
    ) -> OfferResult:
        """Update an existing message; MessageNotFound when there is none."""
        return await self._offer(queue, request, can_create=False, may_use=may_use)

    async def offer_new(
        self,
        queue: str,
        payload: Any,
        when: When,
        priority: int = DEFAULT_PRIORITY,
        group: str | None = None,
    ) -> OfferResult:
        """Create a message under a generated key."""
        return await self.offer(
            queue,
            OfferRequest(
                key=str(uuid.uuid4()), payload=payload, when=when, priority=priority, group=group
            ),
        )

    async def _offer(
        self, queue: str, request: OfferRequest, *, can_create: bool, may_use: QueueFilter
    ) -> OfferResult:
        now = self.clock.now_ms()
        offer = self._to_offer(request, now)
        stored = await self._run(
            queue,
            partial(
                self.storage.messages.offer,
                queue,
                offer,
                now,
                can_create=can_create,
                may_use=may_use,
            ),
        )
        if stored is None:
            raise MessageNotFound(f"no message {request.key!r} in queue {queue!r}")
        self.events.offered(queue, (stored.outcome,))
        if stored.outcome is not Outcome.IGNORED:
            if offer.group is not None:
                await self._settle(queue, [offer.group])
            else:
                self.keeper.changed(queue)  # an update may have taken it out of a group
            self.notifier.notify(queue, stored.scheduled_at)
        return OfferResult(queue, request.key, stored.outcome, stored.scheduled_at)

    async def _settle(self, queue: str, groups: Sequence[str]) -> None:
        """Bring offered grouped messages to their groups' fronts where there is room,
        before the offer answers: a poll right after it finds them. The offer has
        committed, with its marks: should the database fail now, the keeper's next pass
        does this, and the offer still answers what it did."""
        self.keeper.saw_groups(queue)
        try:
            await self.keeper.settle(queue, sorted(set(groups)))
        except StorageUnavailable as error:
            log.warning("offered messages of %r wait for the keeper's next pass: %s", queue, error)
        self.keeper.changed(queue)  # an update may have moved a message out of another group

    async def offer_many(
        self, queue: str, requests: Sequence[OfferRequest], may_use: QueueFilter = every_queue
    ) -> list[Outcome]:
        """Offer a batch: every payload is checked before anything is written."""
        now = self.clock.now_ms()
        offers = [self._to_offer(request, now) for request in requests]
        outcomes = await self._run(
            queue, partial(self.storage.messages.offer_many, queue, offers, now, may_use)
        )
        self.events.offered(queue, outcomes)
        changed = [
            offer
            for offer, outcome in zip(offers, outcomes, strict=True)
            if outcome is not Outcome.IGNORED
        ]
        if groups := [offer.group for offer in changed if offer.group is not None]:
            await self._settle(queue, groups)
        if changed:
            self.keeper.changed(queue)
            self.notifier.notify(queue, min(offer.scheduled_at for offer in changed))
        return outcomes

    def _to_offer(self, request: OfferRequest, now: int) -> Offer:
        due = request.when.resolve(now)
        return Offer(
            key=request.key,
            payload=encode_payload(request.payload, self.max_payload_bytes),
            scheduled_at=due,
            if_exists=request.if_exists,
            priority=request.priority,
            group=request.group,
            expires_at=request.when.expiry(due),
        )

    # -- one message ----------------------------------------------------------------

    async def get(self, queue: str, key: str) -> Message:
        message = await self._run(queue, partial(self.storage.messages.get, queue, key))
        if message is None:
            raise MessageNotFound(f"no message {key!r} in queue {queue!r}")
        return message

    def state_of(self, message: Message) -> State:
        """Where `message` stands now."""
        return message.state(self.clock.now_ms())

    async def delete(self, queue: str, key: str) -> None:
        now = self.clock.now_ms()
        if not await self._run(queue, partial(self.storage.messages.delete, queue, key, now)):
            raise MessageNotFound(f"no message {key!r} in queue {queue!r}")
        self.keeper.changed(queue)

    # -- polling and leases ----------------------------------------------------------

    async def poll(
        self,
        queue: str,
        *,
        limit: int = 1,
        lease_seconds: float | None = None,
        wait_seconds: float = 0,
        abandoned: Callable[[], Awaitable[bool]] | None = None,
    ) -> Lease | None:
        """Lease up to `limit` due messages, while the answer stays within `max_poll_bytes`
        (the first due message always); with a wait, until one is due or the wait ends.

        `abandoned` tells whether the caller has gone away (the client hung up): a
        waiting poll checks it before every later look, so it never leases
        messages that nobody will receive.
        """
        settings = await self.settings(queue)
        if lease_seconds is not None:
            lease_ms = round(lease_seconds * 1000)
        else:
            lease_ms = settings.default_lease_ms or self.default_lease_ms
        lease = await self._poll(queue, settings, limit, lease_ms, wait_seconds, abandoned)
        self.events.polled(queue, lease, self.clock.now_ms())
        return lease

    async def _poll(
        self,
        queue: str,
        settings: QueueSettings,
        limit: int,
        lease_ms: int,
        wait_seconds: float,
        abandoned: Callable[[], Awaitable[bool]] | None,
    ) -> Lease | None:
        if wait_seconds <= 0:
            if await self.paused(queue):
                return None
            look = await self._claim_undoable(queue, settings, limit, lease_ms)
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
                paused, woken = await self.paused(queue, woken=woken), False
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
                look = await self._claim_undoable(queue, settings, limit, lease_ms)
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
                    await self._run(
                        queue, partial(self.storage.leases.give_back, queue, lock_id, look.before)
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
                next_due = await self._run(queue, partial(self.storage.messages.next_due, queue))
                # Due, yet not taken: held by another transaction, or expired and not yet
                # swept. Sweep now rather than look again and again until the sweep comes
                # (docs/decisions/0028-expiry.md); if it took any, look again.
                due_now = next_due is not None and next_due <= self.clock.now_ms()
                if due_now and await self.expire(EXPIRY_SWEEP_BATCH, once=True):
                    continue
                if next_due is not None:
                    until_due = (next_due - self.clock.now_ms()) / 1000
                    timeout = min(timeout, max(until_due, _HELD_BY_OTHERS_RECHECK_SECONDS))
                await self.notifier.wait(ticket, timeout)

    def _held_back(self, queue: str, look: _Look) -> None:
        if look.held_back_by is not None:
            self.events.held_back(queue, look.held_back_by)

    async def _claim_undoable(
        self, queue: str, settings: QueueSettings, limit: int, lease_ms: int
    ) -> _Look:
        """A look: a lease of up to `limit` due messages (or None), with the delivered rows
        as they were before (to give them back), and the limit that held it back."""
        for _ in range(_DEAD_LETTER_LOOKS):
            now = self.clock.now_ms()
            lock_id = str(uuid.uuid4())
            expires_at = now + lease_ms
            claim: Claim = await self._run(
                queue,
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
                return _Look(lease, claim.before, *held_back)
            if not claim.exhausted:
                return _Look(None, (), *held_back)
            # Everything due it found was past its limit: more may be due behind.
        return _Look(None, ())

    async def acknowledge(self, queue: str, lock_id: str) -> None:
        """Delete what the lock still holds."""
        now = self.clock.now_ms()
        count = await self._on_lock(
            queue, lock_id, partial(self.storage.leases.acknowledge, queue, lock_id, now)
        )
        self.keeper.changed(queue)
        self.events.acknowledged(queue, count)
        self._leases_ended(queue)

    async def acknowledge_before_poll(
        self, queue: str, lock_id: str, keys: Sequence[str] | None = None
    ) -> KeyedOutcome:
        """A poll's `ack`, in a transaction of its own before the poll claims: with `keys`,
        `acknowledge_keys`; without, `acknowledge`, answering the keys it deleted (none
        `missing`), and a lock that holds nothing is no error: it acknowledges nothing."""
        if keys is not None:
            return await self.acknowledge_keys(queue, lock_id, keys)
        now = self.clock.now_ms()
        deleted = (
            await self._run(
                queue,
                partial(self.storage.leases.acknowledge_keys_of_lock, queue, lock_id, now),
            )
            if _LOCK_ID.fullmatch(lock_id)
            else []
        )
        if deleted:
            self.keeper.changed(queue)
            self.events.acknowledged(queue, len(deleted))
            self._leases_ended(queue)
        return KeyedOutcome(tuple(deleted), ())

    async def extend(self, queue: str, lock_id: str, lease_seconds: float) -> int:
        """Make the lease end `lease_seconds` from now; the new end (epoch ms).

        In a queue with `max_leased`, a lease that has run out (no poll has retaken its
        messages yet) is made leased again only while the limit has room for it, else
        LockNotFound, as for a lock another poll took over (docs/guide/flow-control.md)."""
        lease_ms = round(lease_seconds * 1000)
        if (await self.settings(queue)).max_leased is None:
            until = self.clock.now_ms() + lease_ms
            await self._on_lock(
                queue, lock_id, partial(self.storage.leases.extend, queue, lock_id, until)
            )
            return until
        if not _LOCK_ID.fullmatch(lock_id):  # never issued: it holds nothing
            raise LockNotFound(f"lock {lock_id!r} holds no message in queue {queue!r}")
        extend = self.storage.leases.extend_within_limits
        extended, until = await self._run(
            queue, partial(extend, queue, lock_id, lease_ms, self.clock.now_ms)
        )
        if extended is None:
            raise LockNotFound(
                f"the lease of lock {lock_id!r} in queue {queue!r} ran out, and the queue's "
                "max_leased leaves no room to lease its messages again: a poll delivers them "
                "again"
            )
        if not extended:
            raise LockNotFound(f"lock {lock_id!r} holds no message in queue {queue!r}")
        return until

    async def acknowledge_keys(self, queue: str, lock_id: str, keys: Sequence[str]) -> KeyedOutcome:
        """Delete those of `keys` the lock still holds; the others are `missing`, and what
        the lock holds besides stays leased."""
        now = self.clock.now_ms()
        outcome = await self._on_keys(
            queue,
            lock_id,
            keys,
            lambda unique: self.storage.leases.acknowledge_keys(queue, lock_id, unique, now),
        )
        if outcome.done:
            self.keeper.changed(queue)
            self.events.acknowledged(queue, len(outcome.done))
            self._leases_ended(queue)
        return outcome

    def _leases_ended(self, queue: str) -> None:
        """Some of the queue's leases ended (acknowledged or released, to be due whenever):
        wake the polls waiting for room under its `max_leased`, here and in peers. Judged by
        the settings this process read lately (no read of its own): a queue without the
        limit tells nobody more than before."""
        cached = self._settings.fresh(queue)
        if cached is not None and cached[0].max_leased is not None:
            self.notifier.notify(queue)

    async def release(
        self,
        queue: str,
        lock_id: str,
        delay_seconds: float | None = None,
        *,
        default_retry: RetryPolicy | None = None,
    ) -> None:
        """Give the messages back as redeliveries, due again after `delay_seconds`, or without
        it after the queue's retry delay for each (when it has none, `default_retry`'s; at
        once without either)."""
        due = await self._due_after_release(queue, delay_seconds, default_retry)

        async def change() -> int:
            if isinstance(due, int):  # one time for all: one statement
                return await self.storage.leases.release(queue, lock_id, due)
            return len(await self.storage.leases.release_each(queue, lock_id, due))  # each

        count = await self._on_lock(queue, lock_id, change)
        self.keeper.changed(queue)
        self.events.released(queue, count)
        # Each by its own retry delay: any of them may be due soon.
        self.notifier.notify(queue, due if isinstance(due, int) else None)
        self._leases_ended(queue)

    async def release_keys(
        self,
        queue: str,
        lock_id: str,
        keys: Sequence[str],
        delay_seconds: float | None = None,
        *,
        default_retry: RetryPolicy | None = None,
    ) -> KeyedOutcome:
        """`release`, of those of `keys` the lock still holds; the others are `missing`, and
        what the lock holds besides stays leased."""
        due = await self._due_after_release(queue, delay_seconds, default_retry)
        each = (lambda _deliveries: due) if isinstance(due, int) else due
        outcome = await self._on_keys(
            queue,
            lock_id,
            keys,
            lambda unique: self.storage.leases.release_each(queue, lock_id, each, unique),
        )
        if outcome.done:
            self.keeper.changed(queue)
            self.events.released(queue, len(outcome.done))
            self.notifier.notify(queue, due if isinstance(due, int) else None)
            self._leases_ended(queue)
        return outcome

    async def _due_after_release(
        self, queue: str, delay_seconds: float | None, default_retry: RetryPolicy | None
    ) -> int | Callable[[int], int]:
        """When released messages are due again: one time (epoch ms) for all of them, or,
        under the queue's retry policy (else `default_retry`), a time for each by its
        deliveries."""
        now = self.clock.now_ms()
        if delay_seconds is not None:  # an explicit delay (0 too) always wins
            return now + round(delay_seconds * 1000)
        retry = (await self.settings(queue)).retry or default_retry
        if retry is None:
            return now
        return partial(_retry_due, retry, self.random, now)

    async def _on_keys(
        self,
        queue: str,
        lock_id: str,
        keys: Sequence[str],
        change: Callable[[list[str]], Awaitable[list[str]]],
    ) -> KeyedOutcome:
        """Apply `change` to those of `keys` (each once, the first kept) the lock holds;
        which it changed, and which were missing, in the order asked."""
        unique = list(dict.fromkeys(keys))
        done = (
            await self._run(queue, partial(change, unique)) if _LOCK_ID.fullmatch(lock_id) else []
        )
        return KeyedOutcome.of(unique, done)

    async def _on_lock(self, queue: str, lock_id: str, change: Callable[[], Awaitable[int]]) -> int:
        """Apply `change` to what the lock holds; how many messages; LockNotFound for none.

        A lock id this service never issued holds nothing: 404 without asking the database.
        """
        count = await self._run(queue, change) if _LOCK_ID.fullmatch(lock_id) else 0
        if not count:
            raise LockNotFound(f"lock {lock_id!r} holds no message in queue {queue!r}")
        return count

    # -- queues ------------------------------------------------------------------------

    async def stats(self, queue: str) -> QueueStats:
        return await self._run(
            queue, partial(self.storage.messages.stats, queue, self.clock.now_ms())
        )

    async def list_queues(self) -> list[QueueStats]:
        return await self.calls.run(partial(self.storage.messages.all_stats, self.clock.now_ms()))

    async def table_health(self) -> TableHealth:
        """What the database tells of its upkeep of the message and history tables."""
        return await self.calls.run(self.storage.table_health.read)

    async def purge(self, queue: str, confirm: str | None) -> int:
        """Delete every message of the queue, if `confirm` repeats its name."""
        if confirm != queue:
            raise PurgeNotConfirmed(f"to purge, repeat the queue's name: ?confirm={queue}")
        return await self._run(
            queue, partial(self.storage.messages.purge, queue, self.clock.now_ms())
        )

    # -- queue settings, dead letters, history -------------------------------------------

    async def settings(self, queue: str) -> QueueSettings:
        """The queue's settings (defaults when it has none), read at most every few seconds."""
        cached = self._settings.fresh(queue)
        if cached is not None:
            return cached[0]
        stored = await self._run(queue, partial(self.storage.settings.get, queue))
        settings = stored or QueueSettings(queue)
        self._settings.keep(queue, settings)
        return settings

    async def paused(self, queue: str, *, woken: bool = False) -> bool:
        """Whether the queue is paused, read at most every PAUSE_CACHE_SECONDS; for a poll
        `woken` (perhaps by a resume through another replica), at most WOKEN_PAUSE_SECONDS
        ago. Callers that ask while it is being read share that read. A read that a pause or
        resume through this service overtook is not kept: it may have begun before that
        change committed."""
        cached = self._pauses.fresh(queue, WOKEN_PAUSE_SECONDS if woken else None)
        if cached is not None:
            return cached[0] is not None
        reading = self._pause_reads.get(queue)
        if reading is None:
            reading = asyncio.ensure_future(self._read_pause(queue))
            self._pause_reads[queue] = reading
            reading.add_done_callback(lambda _: self._pause_reads.pop(queue, None))
        return await asyncio.shield(reading) is not None

    async def _read_pause(self, queue: str) -> int | None:
        changes = self._pause_changes
        paused_at = await self._run(queue, partial(self.storage.settings.paused_at, queue))
        if changes == self._pause_changes:
            self._pauses.keep(queue, paused_at)
        return paused_at

    async def pause(self, queue: str) -> QueueStats:
        """Stop delivering the queue's messages (polls answer empty, push sends nothing),
        on every replica within a second; again is no error. Its stats."""
        now = self.clock.now_ms()
        paused_at = await self._run(queue, partial(self.storage.settings.pause, queue, now))
        self._pause_changes += 1
        self._pauses.keep(queue, paused_at)
        return await self.stats(queue)

    async def resume(self, queue: str) -> QueueStats:
        """Deliver the queue's messages again, waking the polls that wait on it (here and,
        where the database has peers, on every replica); again is no error. Its stats."""
        await self._run(queue, partial(self.storage.settings.resume, queue))
        self._pause_changes += 1
        self._pauses.keep(queue, None)
        self.notifier.notify(queue)
        return await self.stats(queue)

    async def configured_queues(self) -> list[str]:
        """The queues that have settings of their own."""
        return await self.calls.run(self.storage.settings.queues)

    async def pushing_queues(self) -> list[QueueSettings]:
        """The settings of every queue that pushes its messages, read now."""
        return await self.calls.run(self.storage.settings.pushing)

    async def put_settings(
        self,
        queue: str,
        *,
        default_lease_seconds: float | None,
        max_deliveries: int | None,
        dead_letter_queue: str | None,
        retry: RetryPolicy | None = None,
        push: PushTarget | None = None,
        group_concurrency: int | None = None,
        max_leased: int | None = None,
        rate: Rate | None = None,
        may_use: QueueFilter = every_queue,
    ) -> QueueSettings:
        """Replace the queue's settings; fields left out go back to their defaults.
        QueueForbidden when `may_use` refuses the queue its dead letters would go to;
        InvalidSettings for a push target HOURGLASS_PUSH_ALLOWED does not admit."""
        if dead_letter_queue == queue:
            raise InvalidSettings("a queue cannot be its own dead-letter queue")
        if push is not None and (problem := target_problem(push.url, self.push_allowed)):
            raise InvalidSettings(problem)
        settings = QueueSettings(
            queue=queue,
            default_lease_ms=None
            if default_lease_seconds is None
            else round(default_lease_seconds * 1000),
            max_deliveries=max_deliveries,
            dead_letter_queue=dead_letter_queue,
            updated_at=self.clock.now_ms(),
            retry=retry,
            push=push,
            group_concurrency=group_concurrency,
            max_leased=max_leased,
            rate=rate,
        )
        if (
            max_deliveries is not None
            and len(settings.effective_dead_letter_queue) > QUEUE_NAME_MAX
        ):
            raise InvalidSettings(
                f"the default dead-letter queue {settings.effective_dead_letter_queue!r} would be "
                f"longer than {QUEUE_NAME_MAX} characters: name one in dead_letter_queue"
            )
        if max_deliveries is not None or dead_letter_queue is not None:
            # Where this queue's dead letters would go, named or by default.
            _check_allowed(may_use, settings.effective_dead_letter_queue)
        stored = await self._run(queue, partial(self.storage.settings.put, settings))
        self._settings.keep(queue, stored)
        self.keeper.saw_groups(queue)  # its groups were marked: fronts grow or shrink
        self.keeper.changed(queue)
        for listener in self.settings_listeners:
            listener(stored)
        return stored

    async def redrive(
        self, queue: str, to: str | None, limit: int, may_use: QueueFilter = every_queue
    ) -> Redrive:
        """Move dead letters of `queue` back (to `to`, or where each came from), due now.

        QueueForbidden when `may_use` refuses `to`; without `to`, a message whose origin
        it refuses stays, counted as forbidden: the others still move. A `to` naming
        `queue` itself moves nothing: every key is taken there, so every message is skipped.
        """
        if to is not None:
            _check_allowed(may_use, to)
        redrive = await self._run(
            queue,
            partial(self.storage.leases.redrive, queue, to, limit, self.clock.now_ms(), may_use),
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
            swept = await self._run("", partial(self.storage.expiry.expire, now, batch))
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

    async def _run(self, queue: str, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` on behalf of `queue`: it waits for a turn only that queue's calls hold."""
        return await self.calls.run(call, queue)


@dataclass(frozen=True, slots=True)
class _Look:
    """What one look of a poll found: a lease or None, the delivered rows as they were,
    and the queue limit that held it back, with when that limit has room by time alone."""

    lease: Lease | None
    before: tuple[Claimed, ...]
    held_back_by: Limit | None = None
    room_at: int | None = None


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: str | None
    expected: str

    @property
    def ready(self) -> bool:
        return self.current == self.expected


def _retry_due(retry: RetryPolicy, random_source: RandomSource, now: int, deliveries: int) -> int:
    """When a message released at `now` after its `deliveries`-th delivery is due again."""
    return now + retry.delay_ms(deliveries, random_source)


# The lock ids this service hands out; anything else can hold nothing.
_LOCK_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _check_allowed(may_use: QueueFilter, queue: str) -> None:
    """A request limited to some queues may not send messages to a queue outside them."""
    if not may_use(queue):
        raise QueueForbidden(queue)
