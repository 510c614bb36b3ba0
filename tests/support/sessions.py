"""The bounds a database session really has, as its server tells them: what the tests of
every path that connects (tests/storage/test_session_bounds.py, the report's) compare."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.pool import Pool

# The session's own values, by the server's names: milliseconds on PostgreSQL, seconds on
# MariaDB (lock_wait_timeout too, though only innodb_lock_wait_timeout is compared below).
BOUNDS_SQL = {
    "postgresql": (
        "SELECT name, setting FROM pg_settings WHERE name IN "
        "('idle_in_transaction_session_timeout', 'statement_timeout', 'lock_timeout')"
    ),
    "mariadb": (
        "SELECT 'idle_transaction_timeout', @@session.idle_transaction_timeout "
        "UNION ALL SELECT 'max_statement_time', @@session.max_statement_time "
        "UNION ALL SELECT 'innodb_lock_wait_timeout', @@session.innodb_lock_wait_timeout"
    ),
}


def bounds_of(rows: Any) -> dict[str, float]:
    """BOUNDS_SQL's rows as name: number."""
    return {name: float(value) for name, value in rows}


def expected(server: str, *, lock_wait: float, statement: float) -> dict[str, float]:
    """The bounds a session of the service has with these settings: a statement's and a
    lock's, and an idle transaction's at the statement bound plus 2 s (decision 12)."""
    if server == "postgresql":
        return {
            "idle_in_transaction_session_timeout": (statement + 2) * 1000,
            "statement_timeout": statement * 1000,
            "lock_timeout": lock_wait * 1000,
        }
    return {
        "idle_transaction_timeout": statement + 2,
        "max_statement_time": statement,
        "innodb_lock_wait_timeout": lock_wait,
    }


def idle_bound_only(server: str, *, statement: float) -> dict[str, float]:
    """The bounds of a session whose statements may run long (the migrations, the report's
    reads): an idle transaction's alone, the statement bound off (0, the servers' default)."""
    if server == "postgresql":
        return {
            "idle_in_transaction_session_timeout": (statement + 2) * 1000,
            "statement_timeout": 0,
        }
    return {"idle_transaction_timeout": statement + 2, "max_statement_time": 0}


@contextmanager
def sessions_of_engines(server: str) -> Iterator[list[dict[str, float]]]:
    """The bounds of every session a SQLAlchemy engine opens meanwhile, read on each new
    connection as it opens (before whoever opened it uses it), in order."""
    shown: list[dict[str, float]] = []

    def read(dbapi_connection: Any, _record: object) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(BOUNDS_SQL[server])
            shown.append(bounds_of(cursor.fetchall()))
        finally:
            cursor.close()
        dbapi_connection.rollback()  # what the read began, if anything

    event.listen(Pool, "connect", read)
    try:
        yield shown
    finally:
        event.remove(Pool, "connect", read)


def within(shown: dict[str, float], names: dict[str, float]) -> dict[str, float | None]:
    """`shown` narrowed to the names of `names`, to compare with it."""
    return {name: shown.get(name) for name in names}
