"""Every path of the service that connects to a database server bounds how long a
transaction of its may stay idle (and, where its statements are the service's short ones,
how long a statement may run and wait for a lock), as the server's own session shows it:
the storage's connections, engines, PostgreSQL's peers, the start-up check and the
migrations (the report's reads: tests/pipeline/test_report_sessions.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from select import POLLHUP, POLLIN, poll
from typing import Any

import psycopg
import pytest
from sqlalchemy import exc, text

from app.config import DEFAULT_LOCK_TIMEOUT, DEFAULT_STATEMENT_TIMEOUT, Settings
from app.domain.errors import StorageUnavailable
from app.storage.blocking import create_blocking_storage
from app.storage.dialects import for_engine_url
from app.storage.dialects.postgresql.peers import LISTENER_NAME, SENDER_NAME, PostgresPeers
from app.storage.engine import bounds_of as settings_bounds
from app.storage.engine import create_unpooled_engine
from app.storage.schema import upgrade_to_head
from app.storage.startup import DatabaseUrl, check_database
from tests.conftest import SERVERS
from tests.support.sessions import (
    BOUNDS_SQL,
    bounds_of,
    expected,
    idle_bound_only,
    sessions_of_engines,
    within,
)

# Bounds other than the defaults, so that a session that shows them took the settings'.
LOCK_WAIT, STATEMENT = 2.0, 3.0
# How long a test waits for the server to end an idle transaction, past its bound.
SERVER_GRACE_SECONDS = 10.0


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> tuple[str, str]:
    """Each database server of the run, and its URL."""
    return request.param, request.getfixturevalue(f"{request.param}_url")


def _settings(url: str, **overrides: Any) -> Settings:
    return Settings(
        database_url=url,
        auto_migrate=False,
        lock_timeout=LOCK_WAIT,
        statement_timeout=STATEMENT,
        **overrides,
    )


def test_the_storage_connections_bound_their_sessions(server):
    # PostgreSQL: the service's own pool (postgresql/direct.py); MariaDB: an engine's, on
    # threads. The import's executors and the report's schema check use the same.
    name, url = server
    store = create_blocking_storage(_settings(url))
    try:
        shown = bounds_of(store.wait(store.storage.runner.rows(text(BOUNDS_SQL[name]), {})))
    finally:
        store.close()
    assert shown == expected(name, lock_wait=LOCK_WAIT, statement=STATEMENT)


def test_an_engine_of_the_service_bounds_its_sessions(server):
    # create_database_engine: MariaDB's storage, and the scripts' (BlockingStorage.engine).
    name, url = server
    store = create_blocking_storage(_settings(url))
    try:
        with store.engine.connect() as connection:
            shown = bounds_of(connection.exec_driver_sql(BOUNDS_SQL[name]))
    finally:
        store.close()
    assert shown == expected(name, lock_wait=LOCK_WAIT, statement=STATEMENT)


def test_the_start_up_check_bounds_its_session(server):
    name, url = server
    with sessions_of_engines(name) as shown:
        check_database(DatabaseUrl(url))
    # The settings' defaults: it runs before the settings are read through.
    bounds = expected(name, lock_wait=DEFAULT_LOCK_TIMEOUT, statement=DEFAULT_STATEMENT_TIMEOUT)
    assert shown == [bounds]


def test_the_migrations_bound_an_idle_transaction_and_not_a_statement(server):
    # A migration may rebuild an index of a large table, and replicas wait for each
    # other's on the migration lock: no statement bound; an idle transaction's still.
    name, url = server
    with sessions_of_engines(name) as shown:
        upgrade_to_head(url)  # at head already: Alembic connects, takes the lock, looks
    assert shown, "the migrations opened no connection"
    bounds = idle_bound_only(name, statement=DEFAULT_STATEMENT_TIMEOUT)
    assert [within(each, bounds) for each in shown] == [bounds] * len(shown)


class _Events:
    """The peers' events, as asyncio events the test waits on."""

    def __init__(self) -> None:
        self.listening = asyncio.Event()
        self.told = asyncio.Event()

    def listener_connected(self, connected: bool) -> None:
        if connected:
            self.listening.set()

    def listener_reconnected(self) -> None:
        pass

    def peers_told(self, names: int) -> None:
        self.told.set()


@pytest.mark.postgresql_only
def test_the_listener_and_the_notifier_bound_their_sessions(postgresql_url, monkeypatch):
    # Each new psycopg connection's bounds, read on it before its owner uses it.
    shown: dict[str, dict[str, float]] = {}
    connect: Callable[..., Any] = psycopg.AsyncConnection.connect

    async def connect_and_read(**arguments: Any) -> psycopg.AsyncConnection[Any]:
        connection = await connect(**arguments)
        cursor = await connection.execute(BOUNDS_SQL["postgresql"])
        shown[arguments["application_name"]] = bounds_of(await cursor.fetchall())
        return connection

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect_and_read)
    dialect = for_engine_url(postgresql_url, settings_bounds(_settings(postgresql_url)))

    async def scenario() -> None:
        events = _Events()
        peers = dialect.peers(postgresql_url, lambda queue: None, events)
        assert isinstance(peers, PostgresPeers)
        peers.start()
        try:
            async with asyncio.timeout(SERVER_GRACE_SECONDS):
                await events.listening.wait()
                peers.tell("q")
                await events.told.wait()
        finally:
            await peers.stop()

    asyncio.run(scenario())
    bounds = expected("postgresql", lock_wait=LOCK_WAIT, statement=STATEMENT)
    assert shown == {LISTENER_NAME: bounds, SENDER_NAME: bounds}


def test_the_server_ends_a_transaction_left_idle_past_the_bound(server):
    # What the bound is for: a client gone silent mid-transaction loses it (and its
    # locks and snapshot) within the statement bound + 2 s, and the service reads that
    # as the database being unavailable (503), as it reads a lost connection.
    _, url = server
    statement = 0.5  # an idle bound of 2.5 s (3 s on MariaDB: whole seconds)
    store = create_blocking_storage(
        Settings(database_url=url, auto_migrate=False, statement_timeout=statement)
    )
    try:
        with store.engine.connect() as connection:
            connection.exec_driver_sql("SELECT 1 FROM delayed_queue WHERE 1 = 0")  # begins
            socket = connection.connection.dbapi_connection.fileno()  # type: ignore[union-attr]
            began = time.monotonic()
            waiting = poll()
            waiting.register(socket, POLLIN | POLLHUP)
            # The server says why, or just closes the connection: the socket turns readable.
            assert waiting.poll(round((statement + 2 + SERVER_GRACE_SECONDS) * 1000))
            waited = time.monotonic() - began
            with pytest.raises(exc.DBAPIError) as raised:
                connection.exec_driver_sql("SELECT 1")
        error = raised.value
        translated = store.dialect.translated(error.orig or error, error.connection_invalidated)
    finally:
        store.close()
    assert isinstance(translated, StorageUnavailable), translated
    assert waited >= statement + 2 - 0.5, waited


def test_a_postgresql_url_s_own_options_hold_beside_the_bounds(postgresql_url):
    """`?options=-c …` in the URL (a search_path, a work_mem) is kept on every path: the
    service's pool, its engines and the unpooled ones (migrations, the report's counts),
    as the report's JDBC reads keep it; the service's bounds come after it."""
    url = f"{postgresql_url}?options=-c%20work_mem%3D7MB"
    store = create_blocking_storage(_settings(url))
    try:
        pooled = store.wait(store.storage.runner.rows(text("SHOW work_mem"), {}))
        with store.engine.connect() as connection:
            engine = connection.exec_driver_sql("SHOW work_mem").scalar()
            bounds = bounds_of(connection.exec_driver_sql(BOUNDS_SQL["postgresql"]))
    finally:
        store.close()
    unpooled_engine = create_unpooled_engine(url, statements=False)
    try:
        with unpooled_engine.connect() as connection:
            unpooled = connection.exec_driver_sql("SHOW work_mem").scalar()
    finally:
        unpooled_engine.dispose()
    assert [row[0] for row in pooled] == ["7MB"]
    assert (engine, unpooled) == ("7MB", "7MB")
    assert bounds == expected("postgresql", lock_wait=LOCK_WAIT, statement=STATEMENT)
