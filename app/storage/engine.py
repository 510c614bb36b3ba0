"""Builds the Storage for a database URL: on the dialect's own connections (PostgreSQL's
pool, app/storage/dialects/postgresql/direct.py), or on a SQLAlchemy engine's, each call
on a thread (SQLite, MariaDB)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import create_engine, event, exc
from sqlalchemy.engine import Engine
from sqlalchemy.pool import NullPool

from app.config import Settings
from app.storage.calls import READINESS_CONNECTIONS
from app.storage.connection import Connections, ThreadedConnections
from app.storage.dialects import Bounds, Dialect, for_engine_url
from app.storage.dialects.base import PING_AFTER_IDLE_SECONDS
from app.storage.store import Storage

# Rows per multi-row INSERT when SQLAlchemy batches an executemany: at most 200, as a
# batch offer's (docs/decisions/0004-batch-offers.md).
INSERT_ROWS_PER_STATEMENT = 200


def create_database_engine(settings: Settings, dialect: Dialect | None = None) -> Engine:
    """A pooled SQLAlchemy engine for `settings.database_url`, set up for its dialect."""
    dialect = dialect or for_engine_url(settings.database_url, bounds_of(settings))
    options = {
        # The readiness check's connection besides (app/storage/calls.py).
        "pool_size": settings.pool_size + READINESS_CONNECTIONS,
        "max_overflow": 0,
        # StorageCalls' turns keep calls within the pool; this is only a backstop.
        "pool_timeout": dialect.bounds.lock_wait,
        # The most recently used connection first: under light load the others
        # stay idle (and are pinged before use), instead of every one going idle
        # for a while and needing a ping.
        "pool_use_lifo": True,
        "insertmanyvalues_page_size": INSERT_ROWS_PER_STATEMENT,
        **dialect.engine_options(url=settings.database_url),
    }
    engine = create_engine(settings.database_url, **options)
    _ping_doubtful_connections(engine, dialect, dialect.ping(engine))
    dialect.configure_engine(engine)
    return engine


def create_unpooled_engine(
    url: str, *, statements: bool = True, bounds: Bounds | None = None
) -> Engine:
    """An engine without a pool, for work outside the service's storage (the start-up
    check, the migrations, the report's counts), its sessions bounded within `bounds` as
    the service's are (Dialect.session_settings); `statements=False` for work whose
    statements may run long: an idle transaction bounded, a statement not."""
    options = for_engine_url(url, bounds).engine_options(statements=statements, url=url)
    return create_engine(url, poolclass=NullPool, connect_args=options.get("connect_args", {}))


def bounds_of(settings: Settings) -> Bounds:
    """The waits on the database that `settings` allow."""
    return Bounds(lock_wait=settings.lock_timeout, statement=settings.statement_timeout)


def _ping_doubtful_connections(
    engine: Engine, dialect: Dialect, ping: Callable[[Any], object]
) -> None:
    """Replace a dead pooled connection before a request draws it, without a ping per request.

    SQLAlchemy's pool_pre_ping costs a round trip on every checkout, a third of a
    one-statement request. Instead a connection is pinged only when it is in
    doubt: it was idle for more than a second (a proxy or the network may have
    dropped it meanwhile). A failed ping makes the pool open a new one. (PostgreSQL's
    own pool also reads, without a round trip, whether the server wrote to an idle
    connection: app/storage/dialects/postgresql/direct.py.)
    """

    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["checked_in_at"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("checked_in_at")
        if idle_since is None:
            return  # brand new
        if time.monotonic() - idle_since < PING_AFTER_IDLE_SECONDS:
            return  # recently used
        try:
            ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as error:
            # The pool discards this connection and checks out (or opens) another.
            raise exc.DisconnectionError() from error


def create_storage(settings: Settings) -> Storage:
    """The Storage for `settings.database_url`, owning new connections: the dialect's own,
    or a SQLAlchemy engine's on threads. Opens none yet: the first call does."""
    dialect = for_engine_url(settings.database_url, bounds_of(settings))
    size = settings.pool_size + READINESS_CONNECTIONS  # /readyz's own besides
    connections = dialect.connections(settings.database_url, size) or threaded_connections(
        settings, dialect
    )
    return Storage(connections, dialect, record_history=settings.history)


def threaded_connections(settings: Settings, dialect: Dialect) -> Connections:
    """A new SQLAlchemy engine's connections, each call on a thread as many as its pool."""
    engine = create_database_engine(settings, dialect)
    return ThreadedConnections(engine, dialect, settings.pool_size + READINESS_CONNECTIONS)
