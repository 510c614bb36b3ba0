"""Wakes long polls in this process when their queue may have something to deliver, and
tells the other processes on the same database (its `Peers`) so they wake theirs."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

from app.clock import Clock, SystemClock
from app.domain.messages import MAX_WAIT_SECONDS
from app.queue.ports import Peers

# A message due later than this from now can end no poll's wait early: peers are not told.
LONGEST_WAIT_MS = MAX_WAIT_SECONDS * 1000


class Notifier:
    """Per-queue wake-ups for waiting polls. Use from the event loop's thread only.

    A waiting poll subscribes to its queue for as long as it waits, and takes a
    `ticket` *before* each look in the database, so an offer that lands between
    the look and the wait still wakes it. Only queues with subscribers are kept.

    `notify` is called after a change is committed; it wakes this process's polls and
    tells `peers` (when there are any), whose listeners call `wake` in their process.
    """

    def __init__(self, peers: Peers | None = None, clock: Clock | None = None) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._subscribers: Counter[str] = Counter()
        self.closed = False
        self.peers = peers
        self.clock = clock or SystemClock()

    @contextmanager
    def subscription(self, queue: str) -> Iterator[None]:
        """While inside, `ticket(queue)` may be taken and `notify(queue)` sets it."""
        self._subscribers[queue] += 1
        try:
            yield
        finally:
            self._subscribers[queue] -= 1
            if not self._subscribers[queue]:
                del self._subscribers[queue]
                self._events.pop(queue, None)

    def ticket(self, queue: str) -> asyncio.Event:
        """The event the next `notify(queue)` sets (already set once closed)."""
        assert self._subscribers[queue], "take tickets inside subscription(queue)"
        event = self._events.get(queue)
        if event is None:
            event = asyncio.Event()
            if self.closed:
                event.set()
            else:
                self._events[queue] = event
        return event

    def notify(self, queue: str, due_at: int | None = None) -> None:
        """Wake every poll waiting on `queue`, here and, unless the message that changed is
        due (`due_at`, epoch ms; None: now or unknown) beyond the longest wait, in peers."""
        self.wake(queue)
        if self.peers is not None and (
            due_at is None or due_at - self.clock.now_ms() <= LONGEST_WAIT_MS
        ):
            self.peers.tell(queue)

    def notify_every(self) -> None:
        """Wake every waiting poll, here and in peers (after a change that may touch any queue)."""
        self.wake(None)
        if self.peers is not None:
            self.peers.tell(None)

    def wake(self, queue: str | None) -> None:
        """Wake the polls of this process waiting on `queue` (None: on any queue); a peer's
        news arrives here."""
        if queue is None:
            events, self._events = self._events, {}
            for each in events.values():
                each.set()
            return
        event = self._events.pop(queue, None)
        if event is not None:
            event.set()

    def waiting(self, queue: str) -> int:
        """How many polls are subscribed to `queue` now."""
        return self._subscribers[queue]

    @staticmethod
    async def wait(ticket: asyncio.Event, timeout: float) -> None:
        """Until `ticket` is set or `timeout` seconds pass."""
        if timeout > 0 and not ticket.is_set():
            try:
                await asyncio.wait_for(ticket.wait(), timeout)
            except TimeoutError:
                pass

    def close(self) -> None:
        """End every wait now, and every later one at once (shutdown)."""
        self.closed = True
        for event in self._events.values():
            event.set()
        self._events.clear()
