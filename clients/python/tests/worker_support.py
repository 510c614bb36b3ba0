"""Helpers of the worker tests: a worker on a thread, countdowns, histories, offers, slow polls."""

from __future__ import annotations

import asyncio
import builtins
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from hourglass_client import AsyncClient, Client, Offer, Worker

WAIT = 30  # seconds any wait on an event may take before the test fails


@contextmanager
def working(worker: Worker) -> Iterator[list[BaseException]]:
    """`worker` running on a thread; stopped, and drained, on the way out."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(handle_signals=False)
        except BaseException as error:  # noqa: BLE001 - handed to the test
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        worker.stop()
        thread.join(WAIT)
        assert not thread.is_alive(), "the worker did not stop"


class Countdown:
    """Set once `count` calls have been counted."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.lock = threading.Lock()
        self.reached = threading.Event()

    def tick(self) -> None:
        with self.lock:
            self.left -= 1
            if self.left <= 0:
                self.reached.set()


def history_of(hourglass: Client, queue: str, key: str) -> list[tuple[str, int]]:
    return [(entry.outcome, entry.deliveries) for entry in hourglass.history(queue, key=key).items]


def keyed_offer(key: str) -> Offer:
    """An offer of `key` whose payload is the key itself."""
    return Offer(key, key)


class HoldsAnswersThatDoNotWait(AsyncClient):
    """A client that counts the polls it has out at once (and says when one is cut short), and holds
    the answer of each poll that does not wait (claimed already by the service; with
    `empty_too`, an empty one too) until `release` is set."""

    def __init__(self, url: str, *, empty_too: bool = False) -> None:
        super().__init__(url)
        self.empty_too = empty_too  # hold empty answers too
        self.out = 0
        self.most_out = 0
        self.asked: list[int] = []
        self.cut_short = asyncio.Event()  # a poll was cut short (cancelled)
        self.claimed = asyncio.Event()  # a poll that does not wait has claimed
        self.holding = asyncio.Event()  # an answer is held
        self.release = asyncio.Event()
        self._sent = asyncio.Event()

    async def polls_sent(self, count: int) -> None:
        """Wait until `count` polls have been sent."""
        while len(self.asked) < count:
            self._sent.clear()
            await self._sent.wait()

    async def poll(self, queue, *, max, wait, lease, ack=None, answer_begun=None):
        self.out += 1
        self.most_out = builtins.max(self.most_out, self.out)
        self.asked.append(max)
        self._sent.set()
        try:
            lease = await super().poll(
                queue, max=max, wait=wait, lease=lease, ack=ack, answer_begun=answer_begun
            )
            if not wait and (lease.messages or self.empty_too):
                if lease.messages:
                    self.claimed.set()
                self.holding.set()
                await self.release.wait()
            return lease
        except asyncio.CancelledError:
            self.cut_short.set()
            raise
        finally:
            self.out -= 1
