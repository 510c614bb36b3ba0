"""Storage for code that is not async (the Spark executors, scripts, tests): every call of
a room's method runs on an event loop of its own, on a thread of its own, and is waited for.

The service never uses this: it awaits storage on its own event loop (app/storage/calls.py).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from sqlalchemy.engine import Engine

from app.config import Settings
from app.storage.engine import create_database_engine, create_storage
from app.storage.store import Storage

T = TypeVar("T")

# The rooms of a Storage whose methods are wrapped.
_ROOMS = (
    "messages",
    "leases",
    "expiry",
    "cron",
    "settings",
    "groups",
    "history",
    "lists",
    "table_health",
)


class BlockingStorage:
    """`storage`'s rooms with blocking methods (`store.messages.offer(…)` returns the
    outcome), and its other attributes as they are."""

    def __init__(self, storage: Storage, settings: Settings) -> None:
        self.storage = storage
        self._settings = settings
        self._engine: Engine | None = None
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="blocking-storage", daemon=True
        )
        self._thread.start()
        for room in _ROOMS:
            setattr(self, room, _BlockingRoom(getattr(storage, room), self))

    def wait(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Run `coroutine` on this storage's event loop; its result."""
        return self.start(coroutine).result()

    def start(self, coroutine: Coroutine[Any, Any, T]) -> Future[T]:
        """Start `coroutine` on this storage's event loop; its future, to wait for later."""
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop)

    @property
    def engine(self) -> Engine:
        """A SQLAlchemy engine on the same database, for the scripts and tests that read or
        change it besides the rooms (made when first asked for, closed with the storage)."""
        if self._engine is None:
            self._engine = create_database_engine(self._settings, self.storage.dialect)
        return self._engine

    def schema_revision(self) -> str | None:
        return self.wait(self.storage.schema_revision())

    def close(self) -> None:
        """Close the storage's connections, then stop the event loop."""
        if self._loop.is_closed():
            return
        if self._engine is not None:
            self._engine.dispose()
        try:
            self.wait(self.storage.close())
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)


class _BlockingRoom:
    def __init__(self, room: Any, storage: BlockingStorage) -> None:
        self._room = room
        self._storage = storage

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._room, name)
        if not inspect.iscoroutinefunction(found):
            return found

        @functools.wraps(found)
        def blocking(*arguments: Any, **keywords: Any) -> Any:
            return self._storage.wait(found(*arguments, **keywords))

        return blocking


def create_blocking_storage(settings: Settings) -> BlockingStorage:
    """create_storage's Storage for code that is not async."""
    return BlockingStorage(create_storage(settings), settings)
