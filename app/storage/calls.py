"""Storage calls from the services, shared out by queue so that no queue can take every
connection.

A call is a storage method's coroutine, awaited here (PostgreSQL's statements straight on
psycopg's asyncio connections, SQLite's and MariaDB's each on a storage thread:
app/storage/connection.py). It first takes a turn: at most `connections` calls run at
once, and the rest wait, up to the lock bound, then the database is reported busy (503).

Turns are shared out by queue. A queue whose rows are locked from outside keeps
every call of its own waiting on the lock; without a share, a dozen clients
retrying there would hold every connection, and every other queue and /readyz
would answer 503 (docs/decisions/0012-bounded-waits.md). So the last fifth of the turns (two of the default
ten) goes only to a queue that holds none yet: the other queues always find one.
The readiness check has a turn and a connection of its own besides, so /readyz
answers while every other call waits on a locked table.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app.domain.errors import StorageUnavailable
from app.storage.store import Storage

T = TypeVar("T")

# Work of no queue in particular (cron passes, history pruning, the queue list) shares
# its turns as if it were one more queue; no queue has an empty name.
SERVICE_WORK = ""
# The readiness check's own turn (and connection): see the module's docstring.
READINESS_CONNECTIONS = 1


def reserved_turns(connections: int) -> int:
    """How many of `connections` turns go only to a queue holding none: a fifth."""
    return connections // 5


class Turns:
    """`count` turns at the database, shared out by queue: a queue takes one of the last
    `reserve` free turns only while it holds no other. Waiters are served in order of
    arrival among those a freed turn may go to. Lives on one event loop."""

    def __init__(self, count: int, reserve: int) -> None:
        self._free = count
        self._reserve = reserve
        self._held: dict[str, int] = {}  # by queue; a queue holding none has no entry
        self._waiting: deque[tuple[str, asyncio.Future[None]]] = deque()
        self._draining = False
        self._drained: asyncio.Future[None] | None = None

    def held(self, queue: str) -> int:
        return self._held.get(queue, 0)

    async def take(self, queue: str, timeout: float) -> None:
        """Take a turn for `queue`, waiting up to `timeout` seconds (TimeoutError)."""
        if self._may_take(queue):
            self._give(queue)
            return
        turn = asyncio.get_running_loop().create_future()
        waiter = (queue, turn)
        self._waiting.append(waiter)
        try:
            async with asyncio.timeout(timeout):
                await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.give_back(queue)  # handed over just as the wait ended: pass it on
            else:
                self._waiting.remove(waiter)
            raise

    def give_back(self, queue: str) -> None:
        """End a turn of `queue`; the first waiter the turn may go to takes it."""
        held = self._held[queue] - 1
        if held:
            self._held[queue] = held
        else:
            del self._held[queue]
        self._free += 1
        if self._drained is not None and not self._held and not self._drained.done():
            self._drained.set_result(None)
        for waiter in self._waiting:
            waiting_queue, turn = waiter
            if not turn.done() and self._may_take(waiting_queue):
                self._waiting.remove(waiter)
                self._give(waiting_queue)
                turn.set_result(None)
                return

    async def drain(self) -> None:
        """Give no more turns (takers wait until their timeout), and return once every
        turn has ended."""
        self._draining = True
        if self._held:
            self._drained = asyncio.get_running_loop().create_future()
            await self._drained

    def _may_take(self, queue: str) -> bool:
        if self._draining:
            return False
        return self._free > self._reserve or (self._free > 0 and queue not in self._held)

    def _give(self, queue: str) -> None:
        self._free -= 1
        self._held[queue] = self._held.get(queue, 0) + 1


class StorageCalls:
    """Runs storage's methods for the services, each in its turn; one per Storage."""

    def __init__(self, storage: Storage, connections: int, wait_seconds: float) -> None:
        self.storage = storage
        self._wait_seconds = wait_seconds
        self._turns = Turns(connections, reserved_turns(connections))
        self._readiness_turns = Turns(READINESS_CONNECTIONS, 0)

    async def run(self, call: Callable[[], Awaitable[T]], queue: str = SERVICE_WORK) -> T:
        """`await call()`, on behalf of `queue` (or of no queue in particular)."""
        return await self._run(self._turns, queue, call)

    async def run_readiness_check(self, call: Callable[[], Awaitable[T]]) -> T:
        """`await call()` on the turn kept for the readiness check."""
        return await self._run(self._readiness_turns, SERVICE_WORK, call)

    async def _run(self, turns: Turns, queue: str, call: Callable[[], Awaitable[T]]) -> T:
        try:
            await turns.take(queue, self._wait_seconds)
        except TimeoutError:
            raise StorageUnavailable("the database is busy: no connection free in time") from None
        try:
            return await call()
        finally:
            turns.give_back(queue)

    async def close(self) -> None:
        """Wait for calls in flight, then close the storage."""
        await self._turns.drain()
        await self._readiness_turns.drain()
        await self.storage.close()
