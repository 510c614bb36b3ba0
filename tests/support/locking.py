"""Locks held from outside the service, as another application's session would hold
them, and what the service leaves waiting in the database meanwhile."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url


def database_name(url: str) -> str:
    """ "postgresql", "mariadb" or "sqlite", for a database URL."""
    backend = make_url(url).get_backend_name()
    return "mariadb" if backend in ("mariadb", "mysql") else backend


@contextmanager
def locked_from_outside(url: str, queue: str | None = None) -> Iterator[int | None]:
    """Another session holds `queue`'s rows of the message table locked FOR UPDATE, or
    with no queue the whole table (PostgreSQL's ACCESS EXCLUSIVE, MariaDB's LOCK TABLES
    WRITE; on SQLite, which has no row locks, the database's write lock either way),
    until the block ends. Yields that session's id (None on SQLite)."""
    name = database_name(url)
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            if name == "sqlite":
                connection.exec_driver_sql("BEGIN IMMEDIATE")
                session = None
            else:
                if name == "mariadb":
                    # As the service's own sessions: at MariaDB's default REPEATABLE READ
                    # the locking read would lock the gaps beside the queue's index
                    # entries too, and inserts into neighbouring queues would wait there.
                    connection.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                connection.exec_driver_sql("BEGIN")
                if queue is not None:
                    quote = '"' if name == "postgresql" else "`"
                    connection.execute(
                        text(
                            f"SELECT {quote}pKey{quote} FROM delayed_queue "
                            f"WHERE {quote}pKind{quote} = :queue FOR UPDATE"
                        ),
                        {"queue": queue},
                    )
                elif name == "postgresql":
                    connection.exec_driver_sql("LOCK TABLE delayed_queue IN ACCESS EXCLUSIVE MODE")
                else:
                    connection.exec_driver_sql("LOCK TABLES delayed_queue WRITE")
                session_id = "pg_backend_pid()" if name == "postgresql" else "CONNECTION_ID()"
                session = connection.execute(text(f"SELECT {session_id}")).scalar()
            try:
                yield session
            finally:
                connection.exec_driver_sql("ROLLBACK")
                if name == "mariadb" and queue is None:
                    connection.exec_driver_sql("UNLOCK TABLES")
    finally:
        engine.dispose()


# The expiry sweep's reads (docs/decisions/0028-expiry.md), as a LIKE pattern of their
# text: every replica runs one four times a second, whatever the requests, so with the
# whole table locked one of them is always waiting its bounded turn.
EXPIRY_SWEEP = "%expiresAt_ <= %"


def busy_sessions(url: str, besides: int | None, *, but: str | None = None) -> list[str]:
    """The sessions on the database of `url`, other than `besides` and the asking one,
    waiting on a lock or inside a transaction: what the service still holds there. None
    on SQLite, which has no server. `but`: a LIKE pattern of statements to leave out
    (EXPIRY_SWEEP: the service's background sweep, not a request's)."""
    name = database_name(url)
    if name == "sqlite":
        return []
    if name == "postgresql":
        query = (
            "SELECT state || ' ' || coalesce(wait_event_type, '') FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid NOT IN (pg_backend_pid(), :besides) "
            "AND (wait_event_type = 'Lock' OR state LIKE 'idle in transaction%') "
            "AND query NOT LIKE :but"
        )
    else:
        query = (
            "SELECT CONCAT(p.COMMAND, ' ', COALESCE(p.STATE, ''), ' ', "
            "COALESCE(t.trx_state, '')) FROM information_schema.PROCESSLIST p "
            "LEFT JOIN information_schema.INNODB_TRX t ON t.trx_mysql_thread_id = p.ID "
            "WHERE p.DB = DATABASE() AND p.ID NOT IN (CONNECTION_ID(), :besides) "
            "AND (t.trx_id IS NOT NULL OR p.STATE LIKE 'Waiting for%') "
            "AND COALESCE(p.INFO, '') NOT LIKE :but"
        )
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            parameters = {"besides": besides or 0, "but": but or ""}
            return list(connection.execute(text(query), parameters).scalars())
    finally:
        engine.dispose()
