"""Builds the SQLAlchemy engine and the Store for a database URL."""

from __future__ import annotations

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine

from app.config import Settings
from app.storage.dialects import Dialect, for_engine_url
from app.storage.store import SqlStore

# Rows per multi-row INSERT when SQLAlchemy batches an executemany (SPEC §2: ≤ 200).
INSERT_ROWS_PER_STATEMENT = 200
# How long a request waits for a free pooled connection before answering 503.
POOL_TIMEOUT_SECONDS = 10


def create_database_engine(settings: Settings, dialect: Dialect | None = None) -> Engine:
    """A pooled engine for `settings.database_url`, set up for its dialect."""
    dialect = dialect or for_engine_url(settings.database_url)
    engine = create_engine(
        settings.database_url,
        pool_size=settings.pool_size,
        max_overflow=settings.pool_overflow,
        pool_timeout=POOL_TIMEOUT_SECONDS,
        # A connection the server dropped (restart, failover) is replaced on checkout
        # instead of failing the request that drew it.
        pool_pre_ping=True,
        insertmanyvalues_page_size=INSERT_ROWS_PER_STATEMENT,
        **dialect.engine_options(),
    )
    dialect.configure_engine(engine)
    return engine


def create_store(settings: Settings) -> SqlStore:
    """The Store for `settings.database_url`, owning a new engine."""
    dialect = for_engine_url(settings.database_url)
    return SqlStore(create_database_engine(settings, dialect), dialect)
