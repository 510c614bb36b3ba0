"""The push dispatcher (docs/guide/push.md, docs/decisions/0016-push-delivery.md): in each
replica, claims due messages of push queues with a poll's leases and POSTs each to its queue's
endpoint (app/push/sender.py); a 2xx answer acknowledges the message, anything else (or no
answer in time) releases it with the retry delay.

Claims are the queue service's long polls (`QueueService.poll`): the same statement
(FOR UPDATE SKIP LOCKED), so replicas never claim one message at once and pollers of
the queue share it; the same wake-ups (the notifier on offers and releases through
this process, the next due time, the re-check for other replicas); and no database
connection is held while a request is in flight (claim, send, then settle, each its
own storage call). A claim's lease is the request's timeout plus LEASE_MARGIN_MS,
so no other claim takes a message while its request may still run.

Each push queue has a `QueuePusher`: its own claiming task, at most `concurrency`
requests in flight, and its own sender with its own httpx client, so a slow or dead
endpoint only fills its own queue's slots. `PushDispatcher` keeps one pusher per push
queue, from the settings it reads at start and every REFRESH_SECONDS, and at once on a
change made through this replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.domain.errors import StorageUnavailable
from app.domain.messages import Delivery, Lease, PushTarget, QueueSettings
from app.domain.push import PUSH_DEFAULT_RETRY, url_allowed
from app.push.ports import PushEvents, PushResult, Unobserved
from app.push.sender import PushSender
from app.queue.service import QueueService

log = logging.getLogger(__name__)

# A push claim's lease outlasts its request's timeout by this much (ms): the request
# ends by its timeout, then its settlement needs a moment; no claim takes it meanwhile.
LEASE_MARGIN_MS = 5_000
# A request ends at least this long before its lease (s), leaving its settlement time.
SETTLE_MARGIN_SECONDS = 1.0
# How often each replica reads which queues push (a change made through another
# replica applies within this long; one through this replica at once).
REFRESH_SECONDS = 2.0
# On stop, requests in flight get this long to end before they are cancelled (and
# their messages released, due now).
STOP_GRACE_SECONDS = 5.0
# Told of each push settled: its queue, its key, how its request ended.
SettledListener = Callable[[str, str, "PushResult"], None]
# A claim waits at most this long before it looks again (it wakes on offers and at the
# next due time anyway, like a long poll).
CLAIM_WAIT_SECONDS = 20.0
# A pusher claims once this fraction of its slots is free (1/4: at least one): a due
# message waits for a claim only while nearly every slot is busy.
CLAIM_BATCH_DIVISOR = 4
# After a claim failed (the database unreachable), the pusher tries again after this long.
CLAIM_RETRY_SECONDS = 1.0


@dataclass(slots=True)
class _InFlight:
    """A message being pushed: its lock, its key, and whether its request has ended."""

    lock_id: str
    key: str
    settling: bool = False


def _resolve(waiting: dict[tuple[str, bool], list[tuple[str, asyncio.Future[None]]]]) -> None:
    for entries in waiting.values():
        for _, done in entries:
            if not done.done():
                done.set_result(None)


class QueuePusher:
    """One push queue's dispatch: claims up to `concurrency` due messages at a time, sends
    each at once, settles each on its lock."""

    def __init__(
        self,
        service: QueueService,
        queue: str,
        target: PushTarget,
        *,
        allowed: tuple[str, ...],
        secrets: tuple[str, ...],
        events: PushEvents,
        listeners: Sequence[SettledListener] = (),
    ) -> None:
        self.service = service
        self.listeners = listeners
        self.queue = queue
        self.target = target
        self.allowed = allowed
        self.events = events
        self.sender = PushSender(queue, target, secrets=secrets, clock=service.clock)
        self._stopping = False
        self._wake = asyncio.Event()  # a slot came free, or stop
        self._requests: dict[asyncio.Task[None], _InFlight] = {}
        self._task: asyncio.Task[None] | None = None
        # Settlements waiting for the one in progress: (lock id, acknowledge) -> keys and
        # what each push waits on.
        self._unsettled: dict[tuple[str, bool], list[tuple[str, asyncio.Future[None]]]] = {}
        self._settler: asyncio.Task[None] | None = None

    @property
    def in_flight(self) -> int:
        return len(self._requests)

    def start(self) -> None:
        # A context of its own: a pusher started by a settings change through this replica
        # would otherwise log that request's id on every line.
        self._task = asyncio.create_task(
            self._claim_loop(), name=f"push:{self.queue}", context=contextvars.Context()
        )

    def request_stop(self) -> None:
        """Claim nothing more from now on (a waiting claim ends at once)."""
        self._stopping = True
        self._wake.set()
        # Wakes this pusher's waiting claim (and any poll of the queue, which looks again).
        self.service.notifier.wake(self.queue)

    async def finish(self, grace: float | None) -> None:
        """Stop claiming; let requests in flight end within `grace` seconds (None: however
        long they take), then cancel the others and release their messages, due now."""
        self.request_stop()
        if self._task is not None:
            await self._task
        running = dict(self._requests)
        late: dict[asyncio.Task[None], _InFlight] = {}
        if running:
            _, pending = await asyncio.wait(running, timeout=grace)
            # Settling ones are in the database already: they end by its own bounds.
            late = {task: running[task] for task in pending if not running[task].settling}
            for task in late:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        by_lock: dict[str, list[str]] = {}
        for entry in late.values():
            by_lock.setdefault(entry.lock_id, []).append(entry.key)
        for lock_id, keys in by_lock.items():
            await self._settle(lock_id, keys, acknowledge=False, delay_seconds=0)
        await self.sender.close()

    async def _abandoned(self) -> bool:
        return self._stopping

    async def _claim_loop(self) -> None:
        lease_seconds = (self.target.timeout_ms + LEASE_MARGIN_MS) / 1000
        # A claim costs about what a message's request does against a quick endpoint:
        # with many slots, claiming for each one freed would make claims the bottleneck.
        batch = max(1, self.target.concurrency // CLAIM_BATCH_DIVISOR)
        while not self._stopping:
            free = self.target.concurrency - len(self._requests)
            if free < batch:
                self._wake.clear()
                if self.target.concurrency - len(self._requests) < batch and not self._stopping:
                    await self._wake.wait()
                continue
            try:
                lease = await self.service.poll(
                    self.queue,
                    limit=free,
                    lease_seconds=lease_seconds,
                    wait_seconds=CLAIM_WAIT_SECONDS,
                    abandoned=self._abandoned,
                )
            except Exception as error:
                self.events.error("push_claim")
                log.warning(
                    "push: claiming messages of %r failed; trying again in %s s",
                    self.queue,
                    CLAIM_RETRY_SECONDS,
                    # The database down is said in a line; anything else with its traceback.
                    exc_info=None if isinstance(error, StorageUnavailable) else error,
                )
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), CLAIM_RETRY_SECONDS)
                continue
            if lease is None:
                continue
            if self._stopping:  # claimed as the stop came: give it back now
                await self._give_back(lease)
                return
            for delivery in lease.deliveries:
                self._send_soon(lease, delivery)

    def _send_soon(self, lease: Lease, delivery: Delivery) -> None:
        entry = _InFlight(lease.lock_id, delivery.message.key)
        task = asyncio.create_task(self._push(lease, delivery, entry))
        self._requests[task] = entry
        task.add_done_callback(self._request_done)

    def _request_done(self, task: asyncio.Task[None]) -> None:
        self._requests.pop(task, None)
        self._wake.set()
        if not task.cancelled() and (error := task.exception()) is not None:
            log.error("push to %r failed unexpectedly", self.queue, exc_info=error)

    async def _push(self, lease: Lease, delivery: Delivery, entry: _InFlight) -> None:
        """Send one message, then acknowledge it (2xx) or release it with the retry delay."""
        if not url_allowed(self.target.url, self.allowed):
            # Pushers are made only for admitted targets; checked again before every request.
            entry.settling = True
            await self._settle(lease.lock_id, [entry.key], acknowledge=False, delay_seconds=0)
            return
        # The request ends a margin before the lease does, even when the claim itself was
        # slow (it waited for the database): no other claim can take the message while
        # its request may still run.
        lease_left = (lease.expires_at - self.service.clock.now_ms()) / 1000
        budget = min(self.sender.timeout_seconds, lease_left - SETTLE_MARGIN_SECONDS)
        if budget <= 0:
            entry.settling = True
            await self._settle(lease.lock_id, [entry.key], acknowledge=False, delay_seconds=0)
            return
        result, seconds = await self.sender.push(lease, delivery, budget)
        self.events.pushed(self.queue, result, seconds)
        entry.settling = True
        await self._settle_soon(lease.lock_id, entry.key, result is PushResult.SUCCESS)
        for listener in self.listeners:
            listener(self.queue, entry.key, result)

    async def _settle_soon(self, lock_id: str, key: str, acknowledge: bool) -> None:
        """Acknowledge or release `key` with what else ended meanwhile on its lock: while a
        settlement runs, those that follow gather, and go as one statement per lock and
        outcome (a claim's messages share a lock). Returns once it is done."""
        done = asyncio.get_running_loop().create_future()
        self._unsettled.setdefault((lock_id, acknowledge), []).append((key, done))
        if self._settler is None:
            self._settler = asyncio.create_task(self._settle_gathered())
        await done

    async def _settle_gathered(self) -> None:
        gathered: dict[tuple[str, bool], list[tuple[str, asyncio.Future[None]]]] = {}
        try:
            while self._unsettled:
                gathered, self._unsettled = self._unsettled, {}
                await asyncio.gather(
                    *(
                        self._settle(lock_id, [key for key, _ in waiting], acknowledge=acknowledge)
                        for (lock_id, acknowledge), waiting in gathered.items()
                    )
                )
                _resolve(gathered)
        finally:
            self._settler = None
            _resolve(gathered)  # cancelled: nobody waits forever (the leases bring them back)
            _resolve(self._unsettled)

    async def _settle(
        self,
        lock_id: str,
        keys: Sequence[str],
        *,
        acknowledge: bool,
        delay_seconds: float | None = None,
    ) -> None:
        """Acknowledge or release `keys` on their lock. A failure is logged: the message
        comes back when its lease runs out (a push may repeat, never be lost)."""
        try:
            if acknowledge:
                await self.service.acknowledge_keys(self.queue, lock_id, keys)
            else:
                await self.service.release_keys(
                    self.queue, lock_id, keys, delay_seconds, default_retry=PUSH_DEFAULT_RETRY
                )
        except Exception as error:
            self.events.error("push_settle")
            log.warning(
                "push: %s of %d message(s) of %r failed; they come back when their lease ends",
                "acknowledging" if acknowledge else "releasing",
                len(keys),
                self.queue,
                exc_info=None if isinstance(error, StorageUnavailable) else error,
            )

    async def _give_back(self, lease: Lease) -> None:
        keys = [delivery.message.key for delivery in lease.deliveries]
        await self._settle(lease.lock_id, keys, acknowledge=False, delay_seconds=0)


class PushDispatcher:
    """One QueuePusher per queue whose settings push to an admitted target."""

    def __init__(
        self,
        service: QueueService,
        *,
        allowed: tuple[str, ...],
        secrets: tuple[str, ...],
        events: PushEvents | None = None,
        refresh_seconds: float = REFRESH_SECONDS,
        stop_grace_seconds: float = STOP_GRACE_SECONDS,
    ) -> None:
        self.service = service
        self.allowed = allowed
        self.secrets = secrets
        self.events: PushEvents = events or Unobserved()
        self.refresh_seconds = refresh_seconds
        self.stop_grace_seconds = stop_grace_seconds
        self.pushers: dict[str, QueuePusher] = {}
        self._retiring: set[asyncio.Task[None]] = set()
        self._retired: list[QueuePusher] = []
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        # Local settings changes, counted: a refresh that read before the latest change
        # of a queue leaves that queue as the change made it.
        self._changes = 0
        self._changed_at: dict[str, int] = {}
        self._refused: set[tuple[str, str]] = set()
        self._warned_unsigned = False
        # Told of each push once settled (tests wait on them).
        self.settled_listeners: list[SettledListener] = []

    def start(self) -> None:
        self.service.settings.listeners.append(self._settings_changed)
        self._task = asyncio.create_task(self._refresh_loop(), name="push_refresh")

    def request_stop(self) -> None:
        """Stop claiming, in every push queue, now."""
        self._stop.set()
        for pusher in self.pushers.values():
            pusher.request_stop()
        for pusher in self._retired:
            pusher.request_stop()

    async def stop(self) -> None:
        """Stop claiming; give requests in flight the grace, then cancel them and release
        their messages, due now."""
        self.request_stop()
        with contextlib.suppress(ValueError):
            self.service.settings.listeners.remove(self._settings_changed)
        if self._task is not None:
            await self._task
        pushers = [*self.pushers.values(), *self._retired]
        self.pushers = {}
        await asyncio.gather(*(pusher.finish(self.stop_grace_seconds) for pusher in pushers))
        await asyncio.gather(*self._retiring, return_exceptions=True)

    async def refresh(self) -> None:
        """Read which queues push, and start or stop their pushers to match."""
        began_at = self._changes
        pushing = await self.service.settings.pushing()
        wanted = {settings.queue: settings for settings in pushing}
        for queue in set(self.pushers) | set(wanted):
            if self._changed_at.get(queue, -1) > began_at:
                continue  # changed here since the read began: that change stands
            self._apply(queue, wanted.get(queue))

    def _settings_changed(self, settings: QueueSettings) -> None:
        """A change made through this replica applies at once."""
        self._changes += 1
        self._changed_at[settings.queue] = self._changes
        if not self._stop.is_set():
            self._apply(settings.queue, settings)

    def _apply(self, queue: str, settings: QueueSettings | None) -> None:
        """Make `queue`'s pusher match its settings (None: it has none, so it pushes not)."""
        target = None if settings is None else settings.push
        if target is not None and not url_allowed(target.url, self.allowed):
            if (queue, target.url) not in self._refused:
                self._refused.add((queue, target.url))
                log.warning(
                    "queue %r pushes to %r, which HOURGLASS_PUSH_ALLOWED does not admit: "
                    "nothing is sent there, and its messages are not claimed for push",
                    queue,
                    target.url,
                )
            target = None
        current = self.pushers.get(queue)
        if current is not None and current.target == target:
            return
        if current is not None:
            self._retire(self.pushers.pop(queue))
        if target is None or self._stop.is_set():
            return
        if not self.secrets and not self._warned_unsigned:
            self._warned_unsigned = True
            log.warning("queues push with HOURGLASS_PUSH_SECRETS unset: their requests go unsigned")
        pusher = QueuePusher(
            self.service,
            queue,
            target,
            allowed=self.allowed,
            secrets=self.secrets,
            events=self.events,
            listeners=self.settled_listeners,
        )
        self.pushers[queue] = pusher
        pusher.start()

    def _retire(self, pusher: QueuePusher) -> None:
        """Stop `pusher` claiming; its requests in flight end as they would."""
        self._retired.append(pusher)
        task = asyncio.create_task(pusher.finish(grace=None))
        self._retiring.add(task)

        def done(finished: asyncio.Task[None]) -> None:
            self._retiring.discard(finished)
            with contextlib.suppress(ValueError):
                self._retired.remove(pusher)

        task.add_done_callback(done)

    async def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.refresh()
                if not self.allowed:
                    # No target can be admitted until a restart: one read, to warn of
                    # stored ones, is all it takes (an idle service costs nothing more).
                    return
            except Exception as error:
                self.events.error("push_refresh")
                log.warning(
                    "push: reading which queues push failed; trying again in %s s",
                    self.refresh_seconds,
                    exc_info=None if isinstance(error, StorageUnavailable) else error,
                )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.refresh_seconds)
