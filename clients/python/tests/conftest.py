"""Fixtures of the client's tests: a real `hourglass serve` per test module, on SQLite and
PostgreSQL (as the repository's tests choose databases: tests/conftest.py), and the
client both ways, blocking and asyncio."""

from __future__ import annotations

import asyncio
import inspect
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from hourglass_client import AsyncClient, Client
from tests.conftest import DATABASES, scratch_database
from tests.support.server import Server, running_server

# The client speaks HTTP only: SQLite and PostgreSQL, the embedded default and the
# production server, stand for the databases behind it.
# Push targets a test may name (nothing listens there).
SERVER_ENVIRONMENT = {"HOURGLASS_PUSH_ALLOWED": "http://127.0.0.1:9/hooks/"}
CLIENT_DATABASES = [name for name in ("sqlite", "postgresql") if name in DATABASES]


@pytest.fixture(scope="module", params=CLIENT_DATABASES)
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """`hourglass serve` on a database of its own, once per test module and database."""
    if request.param == "sqlite":
        path = tmp_path_factory.mktemp("client") / "hourglass.db"
        with running_server(f"sqlite:///{path}", **SERVER_ENVIRONMENT) as server:
            yield server
    else:
        with (
            scratch_database(request.param, "client") as url,
            running_server(url, **SERVER_ENVIRONMENT) as server,
        ):
            yield server


@pytest.fixture
def queue() -> str:
    """A queue of the test's own (tests share their module's server)."""
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def hourglass(service: Server) -> Iterator[Client]:
    """A blocking client of the module's server."""
    with Client(service.url) as client:
        yield client


class BlockingAsync:
    """An `AsyncClient` driven from blocking test code, on an event loop of its own thread,
    so one test exercises both clients."""

    def __init__(self, url: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client: AsyncClient = self.wait(self._make(url))

    @staticmethod
    async def _make(url: str) -> AsyncClient:
        return AsyncClient(url)

    def wait(self, awaitable: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(awaitable, self.loop).result(60)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)

        def call(*arguments: Any, **keywords: Any) -> Any:
            result = method(*arguments, **keywords)
            if inspect.isasyncgen(result):
                return iter(self.wait(_collect(result)))
            return self.wait(result)

        return call

    def close(self) -> None:
        self.wait(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


async def _collect(items: Any) -> list[Any]:
    return [item async for item in items]


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest, service: Server) -> Iterator[Any]:
    """The client under test: `Client`, or `AsyncClient` behind a blocking facade."""
    if request.param == "sync":
        with Client(service.url) as client:
            yield client
    else:
        facade = BlockingAsync(service.url)
        try:
            yield facade
        finally:
            facade.close()
