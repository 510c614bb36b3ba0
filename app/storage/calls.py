"""Storage calls from async code: on the event loop where the driver allows, else on threads.

With an asyncio driver (PostgreSQL's psycopg) a call runs inside
`sqlalchemy.util.greenlet_spawn` on the running loop, at most `connections` at
once; the rest wait for a turn, up to the pool timeout, then the database is
reported busy. Otherwise each call runs on a thread of its own pool, one thread
per connection (see docs/decisions/0001).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from sqlalchemy.util import greenlet_spawn

from app.domain.errors import StorageUnavailable
from app.storage.engine import POOL_TIMEOUT_SECONDS
from app.storage.store import Store

T = TypeVar("T")


class StorageCalls:
    """Runs a store's blocking-looking methods for async callers; one per store."""

    def __init__(self, store: Store, connections: int) -> None:
        self.store = store
        self._connections = connections
        self._executor = (
            None
            if store.runs_on_event_loop
            else ThreadPoolExecutor(max_workers=connections, thread_name_prefix="storage")
        )
        # On the event loop, at most as many calls at once as there are connections:
        # the rest wait here, which is cheaper than waiting inside the pool.
        self._slots = asyncio.Semaphore(connections)

    async def run(self, call: Callable[[], T]) -> T:
        if self._executor is not None:
            return await asyncio.get_running_loop().run_in_executor(self._executor, call)
        try:
            async with asyncio.timeout(POOL_TIMEOUT_SECONDS):
                await self._slots.acquire()
        except TimeoutError:
            raise StorageUnavailable("the database is busy: no connection free in time") from None
        try:
            return await greenlet_spawn(call)  # I/O on this event loop, no thread
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Wait for calls in flight, then close the store."""
        if self._executor is not None:
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._executor.shutdown)  # waits for calls
            await loop.run_in_executor(None, self.store.close)
            return
        for _ in range(self._connections):  # every slot: no call is in flight any more
            await self._slots.acquire()
        await greenlet_spawn(self.store.close)
