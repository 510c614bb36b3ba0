"""The queue's rules over a Store and a Clock: offers, polls (long or not), leases, stats.

Storage calls go through StorageCalls (on the event loop with PostgreSQL, on
threads with SQLite); the event loop only waits. A long poll waits on the
Notifier, holding no database connection while it waits.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol, TypeVar

from app.clock import Clock
from app.queue.errors import (
    LockNotFound,
    MessageNotFound,
    PurgeNotConfirmed,
)
from app.queue.models import (
    Lease,
    Message,
    Offer,
    OfferRequest,
    OfferResult,
    Outcome,
    QueueStats,
    State,
    When,
)
from app.queue.notifier import Notifier
from app.queue.payloads import encode_payload
from app.storage.calls import StorageCalls
from app.storage.schema import head_revision
from app.storage.store import Store

T = TypeVar("T")

# When a poll finds due messages that other polls hold (SKIP LOCKED), they are
# usually released within milliseconds; look again after this long.
_HELD_BY_OTHERS_RECHECK_SECONDS = 0.01


class QueueEvents(Protocol):
    """What the service reports as it works (the app's metrics listen)."""

    def offered(self, queue: str, outcomes: Sequence[Outcome]) -> None: ...

    def polled(self, queue: str, lease: Lease | None, now: int) -> None: ...

    def acknowledged(self, queue: str, count: int) -> None: ...


class _Unobserved:
    def offered(self, queue: str, outcomes: Sequence[Outcome]) -> None:
        pass

    def polled(self, queue: str, lease: Lease | None, now: int) -> None:
        pass

    def acknowledged(self, queue: str, count: int) -> None:
        pass


class QueueService:
    """Everything a client can ask of the queue, as async methods."""

    def __init__(
        self,
        store: Store,
        clock: Clock,
        *,
        default_lease_seconds: float,
        max_payload_bytes: int,
        poll_recheck_seconds: float,
        connections: int,
        events: QueueEvents | None = None,
    ) -> None:
        self.store = store
        self.events: QueueEvents = events or _Unobserved()
        self.clock = clock
        self.default_lease_ms = round(default_lease_seconds * 1000)
        self.max_payload_bytes = max_payload_bytes
        self.poll_recheck_seconds = poll_recheck_seconds
        self.notifier = Notifier()
        self.calls = StorageCalls(store, connections)

    async def close(self) -> None:
        """End waiting polls, wait for storage calls in flight, close the store."""
        self.notifier.close()
        await self.calls.close()

    # -- offers -------------------------------------------------------------------

    async def offer(self, queue: str, request: OfferRequest) -> OfferResult:
        """Create the message, or update or ignore it when its key exists."""
        return await self._offer(queue, request, can_create=True)

    async def update(self, queue: str, request: OfferRequest) -> OfferResult:
        """Update an existing message; MessageNotFound when there is none."""
        return await self._offer(queue, request, can_create=False)

    async def offer_new(self, queue: str, payload: Any, when: When) -> OfferResult:
        """Create a message under a generated key."""
        return await self.offer(
            queue, OfferRequest(key=str(uuid.uuid4()), payload=payload, when=when)
        )

    async def _offer(self, queue: str, request: OfferRequest, *, can_create: bool) -> OfferResult:
        now = self.clock.now_ms()
        offer = self._to_offer(request, now)
        stored = await self._run(
            partial(self.store.messages_offer, queue, offer, now, can_create=can_create)
        )
        if stored is None:
            raise MessageNotFound(f"no message {request.key!r} in queue {queue!r}")
        self.events.offered(queue, (stored.outcome,))
        if stored.outcome is not Outcome.IGNORED:
            self.notifier.notify(queue)
        return OfferResult(queue, request.key, stored.outcome, stored.scheduled_at)

    async def offer_many(self, queue: str, requests: Sequence[OfferRequest]) -> list[Outcome]:
        """Offer a batch: every payload is checked before anything is written."""
        now = self.clock.now_ms()
        offers = [self._to_offer(request, now) for request in requests]
        outcomes = await self._run(partial(self.store.messages_offer_many, queue, offers, now))
        self.events.offered(queue, outcomes)
        if any(outcome is not Outcome.IGNORED for outcome in outcomes):
            self.notifier.notify(queue)
        return outcomes

    def _to_offer(self, request: OfferRequest, now: int) -> Offer:
        return Offer(
            key=request.key,
            payload=encode_payload(request.payload, self.max_payload_bytes),
            scheduled_at=request.when.resolve(now),
            if_exists=request.if_exists,
        )

    # -- one message ----------------------------------------------------------------

    async def get(self, queue: str, key: str) -> Message:
        message = await self._run(partial(self.store.messages_get, queue, key))
        if message is None:
            raise MessageNotFound(f"no message {key!r} in queue {queue!r}")
        return message

    def state_of(self, message: Message) -> State:
        """Where `message` stands now."""
        return message.state(self.clock.now_ms())

    async def delete(self, queue: str, key: str) -> None:
        if not await self._run(partial(self.store.messages_delete, queue, key)):
            raise MessageNotFound(f"no message {key!r} in queue {queue!r}")

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
        """Lease up to `limit` due messages; with a wait, until one is due or the wait ends.

        `abandoned` tells whether the caller has gone away (the client hung up): a
        waiting poll checks it before every later look, so it never leases
        messages that nobody will receive.
        """
        lease_ms = self.default_lease_ms if lease_seconds is None else round(lease_seconds * 1000)
        lease = await self._poll(queue, limit, lease_ms, wait_seconds, abandoned)
        self.events.polled(queue, lease, self.clock.now_ms())
        return lease

    async def _poll(
        self,
        queue: str,
        limit: int,
        lease_ms: int,
        wait_seconds: float,
        abandoned: Callable[[], Awaitable[bool]] | None,
    ) -> Lease | None:
        if wait_seconds <= 0:
            return await self._claim(queue, limit, lease_ms)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_seconds
        with self.notifier.subscription(queue):
            first_look = True
            while True:
                ticket = self.notifier.ticket(queue)
                if not first_look and abandoned is not None and await abandoned():
                    return None
                first_look = False
                lease = await self._claim(queue, limit, lease_ms)
                remaining = deadline - loop.time()
                if lease is not None or remaining <= 0 or self.notifier.closed:
                    return lease
                next_due = await self._run(partial(self.store.queue_next_due, queue))
                timeout = min(remaining, self.poll_recheck_seconds)
                if next_due is not None:
                    until_due = (next_due - self.clock.now_ms()) / 1000
                    timeout = min(timeout, max(until_due, _HELD_BY_OTHERS_RECHECK_SECONDS))
                await self.notifier.wait(ticket, timeout)

    async def _claim(self, queue: str, limit: int, lease_ms: int) -> Lease | None:
        now = self.clock.now_ms()
        lock_id = str(uuid.uuid4())
        expires_at = now + lease_ms
        deliveries = await self._run(
            partial(self.store.messages_poll, queue, limit, lock_id, expires_at, now)
        )
        if not deliveries:
            return None
        return Lease(lock_id=lock_id, expires_at=expires_at, deliveries=tuple(deliveries))

    async def acknowledge(self, queue: str, lock_id: str) -> None:
        """Delete what the lock still holds."""
        count = await self._on_lock(
            queue, lock_id, partial(self.store.locks_acknowledge, queue, lock_id)
        )
        self.events.acknowledged(queue, count)

    async def extend(self, queue: str, lock_id: str, lease_seconds: float) -> int:
        """Make the lease end `lease_seconds` from now; the new end (epoch ms)."""
        until = self.clock.now_ms() + round(lease_seconds * 1000)
        await self._on_lock(queue, lock_id, partial(self.store.locks_extend, queue, lock_id, until))
        return until

    async def release(self, queue: str, lock_id: str, delay_seconds: float = 0) -> None:
        """Give the messages back, due again after `delay_seconds`, as redeliveries."""
        at = self.clock.now_ms() + round(delay_seconds * 1000)
        await self._on_lock(queue, lock_id, partial(self.store.locks_release, queue, lock_id, at))
        self.notifier.notify(queue)

    async def _on_lock(self, queue: str, lock_id: str, change: Callable[[], int]) -> int:
        """Apply `change` to what the lock holds; how many messages; LockNotFound for none.

        A lock id this service never issued holds nothing: 404 without asking the database.
        """
        count = await self._run(change) if _LOCK_ID.fullmatch(lock_id) else 0
        if not count:
            raise LockNotFound(f"lock {lock_id!r} holds no message in queue {queue!r}")
        return count

    # -- queues ------------------------------------------------------------------------

    async def stats(self, queue: str) -> QueueStats:
        return await self._run(partial(self.store.queue_stats, queue, self.clock.now_ms()))

    async def list_queues(self) -> list[QueueStats]:
        return await self._run(partial(self.store.queues_stats, self.clock.now_ms()))

    async def purge(self, queue: str, confirm: str | None) -> int:
        """Delete every message of the queue, if `confirm` repeats its name."""
        if confirm != queue:
            raise PurgeNotConfirmed(f"to purge, repeat the queue's name: ?confirm={queue}")
        return await self._run(partial(self.store.queue_purge, queue))

    async def schema_status(self) -> SchemaStatus:
        """Whether the database answers at the schema this release needs."""
        return SchemaStatus(
            current=await self._run(self.store.schema_revision), expected=head_revision()
        )

    async def _run(self, call: Callable[[], T]) -> T:
        return await self.calls.run(call)


@dataclass(frozen=True, slots=True)
class SchemaStatus:
    current: str | None
    expected: str

    @property
    def ready(self) -> bool:
        return self.current == self.expected


# The lock ids this service hands out; anything else can hold nothing.
_LOCK_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
