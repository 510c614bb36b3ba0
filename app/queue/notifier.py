"""Wakes long polls in this process when their queue may have something to deliver."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager


class Notifier:
    """Per-queue wake-ups for waiting polls. Use from the event loop's thread only.

    A waiting poll subscribes to its queue for as long as it waits, and takes a
    `ticket` *before* each look in the database, so an offer that lands between
    the look and the wait still wakes it. Only queues with subscribers are kept.
    """

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self._subscribers: Counter[str] = Counter()
        self.closed = False

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

    def notify(self, queue: str) -> None:
        """Wake every poll waiting on `queue`."""
        event = self._events.pop(queue, None)
        if event is not None:
            event.set()

    def notify_every(self) -> None:
        """Wake every waiting poll (after a change that may touch any queue)."""
        events, self._events = self._events, {}
        for event in events.values():
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
