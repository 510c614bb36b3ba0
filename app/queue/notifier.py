"""Wakes long polls in this process when their queue may have something to deliver."""

from __future__ import annotations

import asyncio


class Notifier:
    """Per-queue wake-ups for waiting polls. Use from the event loop's thread only.

    A poll takes `ticket(queue)` *before* it looks in the database and waits on
    it after finding nothing, so an offer landing in between still wakes it.
    """

    def __init__(self) -> None:
        self._events: dict[str, asyncio.Event] = {}
        self.closed = False

    def ticket(self, queue: str) -> asyncio.Event:
        """The event the next `notify(queue)` sets (already set once closed)."""
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
