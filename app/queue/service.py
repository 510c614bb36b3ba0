"""The queue's offers and leases over storage (its ports: app/queue/ports.py) and a Clock, with
the parts it is built of: each queue's settings (app/queue/settings.py), a poll's looks
(app/queue/polling.py) and the upkeep (app/queue/upkeep.py).

Storage calls go through StorageCalls, each on behalf of its queue, so that one queue
in trouble cannot take every connection.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import TypeVar

from app.clock import Clock
from app.domain.errors import LockNotFound, MessageNotFound, PurgeNotConfirmed, StorageUnavailable
from app.domain.messages import (
    KeyedOutcome,
    Lease,
    Message,
    Offer,
    OfferRequest,
    OfferResult,
    Outcome,
    QueueFilter,
    QueueStats,
    RandomSource,
    RetryPolicy,
    State,
    every_queue,
)
from app.domain.payloads import encode_payload
from app.queue.groups import GroupKeeper
from app.queue.notifier import Notifier
from app.queue.polling import Poller
from app.queue.ports import QueueEvents, QueueStorage, Unobserved
from app.queue.settings import QueueSettingsService
from app.queue.upkeep import QueueUpkeep
from app.storage.calls import StorageCalls

T = TypeVar("T")

log = logging.getLogger(__name__)


class QueueService:
    """Everything a client can ask of the queue, as async methods: here, or of its parts
    `settings` (a queue's settings and pause) and `upkeep` (redrive, and the background work)."""

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
        `random_source` and `push_allowed` go to the queues' settings (app/queue/settings.py)."""
        self.storage = storage
        self.events: QueueEvents = events or Unobserved()
        self.clock = clock
        self.default_lease_ms = round(default_lease_seconds * 1000)
        self.max_payload_bytes = max_payload_bytes
        self.notifier = notifier
        self.calls = calls
        # Brings each group's next messages to its front (the application starts it).
        self.keeper = GroupKeeper(storage.groups, self._run, notifier, clock)
        self.settings = QueueSettingsService(
            storage.settings,
            calls,
            notifier,
            self.keeper,
            clock,
            random_source=random_source,
            push_allowed=push_allowed,
        )
        self.upkeep = QueueUpkeep(storage, calls, notifier, self.keeper, clock, self.events)
        self.poller = Poller(
            storage,
            calls,
            notifier,
            self.keeper,
            clock,
            self.events,
            self.settings,
            self.upkeep,
            max_poll_bytes=max_poll_bytes,
            poll_recheck_seconds=poll_recheck_seconds,
        )

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

    async def offer_new(self, queue: str, request: OfferRequest) -> OfferResult:
        """Create `request`'s message under a generated key (the key it carries is not used)."""
        return await self.offer(queue, replace(request, key=str(uuid.uuid4())))

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
            trace=request.trace,
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
        settings = await self.settings.get(queue)
        if lease_seconds is not None:
            lease_ms = round(lease_seconds * 1000)
        else:
            lease_ms = settings.default_lease_ms or self.default_lease_ms
        lease = await self.poller.poll(queue, settings, limit, lease_ms, wait_seconds, abandoned)
        self.events.polled(queue, lease, self.clock.now_ms())
        return lease

    async def acknowledge(self, queue: str, lock_id: str) -> None:
        """Delete what the lock still holds."""
        now = self.clock.now_ms()
        count = await self._on_lock(
            queue, lock_id, partial(self.storage.leases.acknowledge, queue, lock_id, now)
        )
        self.keeper.changed(queue)
        self.events.acknowledged(queue, count)
        self.settings.leases_ended(queue)

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
            self.settings.leases_ended(queue)
        return KeyedOutcome(tuple(deleted), ())

    async def extend(self, queue: str, lock_id: str, lease_seconds: float) -> int:
        """Make the lease end `lease_seconds` from now; the new end (epoch ms).

        In a queue with `max_leased`, a lease that has run out (no poll has retaken its
        messages yet) is made leased again only while the limit has room for it, else
        LockNotFound, as for a lock another poll took over (docs/guide/flow-control.md)."""
        lease_ms = round(lease_seconds * 1000)
        if (await self.settings.get(queue)).max_leased is None:
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
            self.settings.leases_ended(queue)
        return outcome

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
        due = await self.settings.release_due(queue, delay_seconds, default_retry)

        async def change() -> int:
            if isinstance(due, int):  # one time for all: one statement
                return await self.storage.leases.release(queue, lock_id, due)
            return len(await self.storage.leases.release_each(queue, lock_id, due))  # each

        count = await self._on_lock(queue, lock_id, change)
        self.keeper.changed(queue)
        self.events.released(queue, count)
        # Each by its own retry delay: any of them may be due soon.
        self.notifier.notify(queue, due if isinstance(due, int) else None)
        self.settings.leases_ended(queue)

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
        due = await self.settings.release_due(queue, delay_seconds, default_retry)
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
            self.settings.leases_ended(queue)
        return outcome

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

    async def purge(self, queue: str, confirm: str | None) -> int:
        """Delete every message of the queue, if `confirm` repeats its name."""
        if confirm != queue:
            raise PurgeNotConfirmed(f"to purge, repeat the queue's name: ?confirm={queue}")
        return await self._run(
            queue, partial(self.storage.messages.purge, queue, self.clock.now_ms())
        )

    async def pause(self, queue: str) -> QueueStats:
        """Stop delivering the queue's messages (polls answer empty, push sends nothing),
        on every replica within a second; again is no error. Its stats."""
        await self.settings.pause(queue)
        return await self.stats(queue)

    async def resume(self, queue: str) -> QueueStats:
        """Deliver the queue's messages again, waking the polls that wait on it (here and,
        where the database has peers, on every replica); again is no error. Its stats."""
        await self.settings.resume(queue)
        return await self.stats(queue)

    async def _run(self, queue: str, call: Callable[[], Awaitable[T]]) -> T:
        """`call()` on behalf of `queue`: it waits for a turn only that queue's calls hold."""
        return await self.calls.run(call, queue)


# The lock ids this service hands out; anything else can hold nothing.
_LOCK_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
