"""Each queue's settings and pause: read through a short cache, checked before they are stored,
and what they say when leases end (the retry delay, the wake-up for room under `max_leased`)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from functools import partial

from app.clock import Clock
from app.domain.errors import InvalidSettings, QueueForbidden
from app.domain.messages import (
    PushTarget,
    QueueFilter,
    QueueSettings,
    RandomSource,
    Rate,
    RetryPolicy,
    every_queue,
)
from app.domain.push import target_problem
from app.queue.groups import GroupKeeper
from app.queue.notifier import Notifier
from app.queue.ports import Settings
from app.queue.recent import Recent
from app.storage.calls import StorageCalls

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
# Queue names are at most this long (the column's size).
QUEUE_NAME_MAX = 100


class QueueSettingsService:
    """A queue's settings (defaults when it has none) and whether it is paused, as this
    process last read them, and the changes made to them."""

    def __init__(
        self,
        storage: Settings,
        calls: StorageCalls,
        notifier: Notifier,
        keeper: GroupKeeper,
        clock: Clock,
        *,
        random_source: RandomSource | None = None,
        push_allowed: tuple[str, ...] = (),
    ) -> None:
        """`storage`: the settings' room, its methods run through `calls`. `random_source`
        spreads retry delays by their jitter (tests fix it, like the clock). `push_allowed`:
        the URL prefixes a push target must match (none: no push)."""
        self.storage = storage
        self.calls = calls
        self.notifier = notifier
        self.keeper = keeper
        self.clock = clock
        self.random: RandomSource = random_source or random.Random()
        self.push_allowed = push_allowed
        # Told of every queue's settings stored through this service (the push dispatcher
        # applies a change at once).
        self.listeners: list[Callable[[QueueSettings], None]] = []
        # What this process read lately.
        self.cache: Recent[str, QueueSettings] = Recent(
            clock, SETTINGS_CACHE_SECONDS, _SETTINGS_CACHE_SIZE
        )
        # queue -> since when it is paused (None: it delivers); and how many pauses and
        # resumes this service has made, which tells a read they overtook.
        self._pauses: Recent[str, int | None] = Recent(
            clock, PAUSE_CACHE_SECONDS, _SETTINGS_CACHE_SIZE
        )
        self._pause_changes = 0
        self._pause_reads: dict[str, asyncio.Future[int | None]] = {}

    async def get(self, queue: str) -> QueueSettings:
        """The queue's settings (defaults when it has none), read at most every few seconds."""
        cached = self.cache.fresh(queue)
        if cached is not None:
            return cached[0]
        stored = await self.calls.run(partial(self.storage.get, queue), queue)
        settings = stored or QueueSettings(queue)
        self.cache.keep(queue, settings)
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
        paused_at = await self.calls.run(partial(self.storage.paused_at, queue), queue)
        if changes == self._pause_changes:
            self._pauses.keep(queue, paused_at)
        return paused_at

    async def pause(self, queue: str) -> None:
        """Stop delivering the queue's messages (polls answer empty, push sends nothing),
        on every replica within a second; again is no error."""
        now = self.clock.now_ms()
        paused_at = await self.calls.run(partial(self.storage.pause, queue, now), queue)
        self._pause_changes += 1
        self._pauses.keep(queue, paused_at)

    async def resume(self, queue: str) -> None:
        """Deliver the queue's messages again, waking the polls that wait on it (here and,
        where the database has peers, on every replica); again is no error."""
        await self.calls.run(partial(self.storage.resume, queue), queue)
        self._pause_changes += 1
        self._pauses.keep(queue, None)
        self.notifier.notify(queue)

    async def configured(self) -> list[str]:
        """The queues that have settings of their own."""
        return await self.calls.run(self.storage.queues)

    async def pushing(self) -> list[QueueSettings]:
        """The settings of every queue that pushes its messages, read now."""
        return await self.calls.run(self.storage.pushing)

    async def put(
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
            check_allowed(may_use, settings.effective_dead_letter_queue)
        stored = await self.calls.run(partial(self.storage.put, settings), queue)
        self.cache.keep(queue, stored)
        self.keeper.saw_groups(queue)  # its groups were marked: fronts grow or shrink
        self.keeper.changed(queue)
        for listener in self.listeners:
            listener(stored)
        return stored

    async def release_due(
        self, queue: str, delay_seconds: float | None, default_retry: RetryPolicy | None
    ) -> int | Callable[[int], int]:
        """When released messages are due again: one time (epoch ms) for all of them, or,
        under the queue's retry policy (else `default_retry`), a time for each by its
        deliveries."""
        now = self.clock.now_ms()
        if delay_seconds is not None:  # an explicit delay (0 too) always wins
            return now + round(delay_seconds * 1000)
        retry = (await self.get(queue)).retry or default_retry
        if retry is None:
            return now
        return partial(_retry_due, retry, self.random, now)

    def leases_ended(self, queue: str) -> None:
        """Some of the queue's leases ended (acknowledged or released, to be due whenever):
        wake the polls waiting for room under its `max_leased`, here and in peers. Judged by
        the settings this process read lately (no read of its own): a queue without the
        limit tells nobody more than before."""
        cached = self.cache.fresh(queue)
        if cached is not None and cached[0].max_leased is not None:
            self.notifier.notify(queue)


def _retry_due(retry: RetryPolicy, random_source: RandomSource, now: int, deliveries: int) -> int:
    """When a message released at `now` after its `deliveries`-th delivery is due again."""
    return now + retry.delay_ms(deliveries, random_source)


def check_allowed(may_use: QueueFilter, queue: str) -> None:
    """A request limited to some queues may not send messages to a queue outside them."""
    if not may_use(queue):
        raise QueueForbidden(queue)
