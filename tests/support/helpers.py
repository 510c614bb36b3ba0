"""Small helpers shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select, text
from sqlalchemy.engine import make_url

from app.domain.formats import format_timestamp
from app.storage.tables import cron_entries, delayed_queue, delivery_history, queue_settings


def at(epoch_ms: int) -> str:
    """An RFC 3339 time the API accepts and prints."""
    return format_timestamp(epoch_ms)


def put(client: TestClient, queue: str, key: str, payload: Any = None, **fields: Any):
    return client.put(f"/v1/queues/{queue}/messages/{key}", json={"payload": payload, **fields})


def poll(client: TestClient, queue: str, **fields: Any) -> dict[str, Any]:
    response = client.post(f"/v1/queues/{queue}/poll", json=fields)
    assert response.status_code == 200, response.text
    return response.json()


def keys_of(polled: dict[str, Any]) -> list[str]:
    return [message["key"] for message in polled["messages"]]


def stored_rows(url: str) -> list[dict[str, Any]]:
    """Every row of the message table, straight from the database."""
    return _table_rows(url, delayed_queue, delayed_queue.c.id)


def history_rows(url: str) -> list[dict[str, Any]]:
    """Every row of the delivery history without its id, oldest first."""
    rows = _table_rows(url, delivery_history, delivery_history.c.id)
    return [{name: value for name, value in row.items() if name != "id"} for row in rows]


def settings_rows(url: str) -> list[dict[str, Any]]:
    return _table_rows(url, queue_settings, queue_settings.c.queue)


def cron_rows(url: str) -> list[dict[str, Any]]:
    return _table_rows(url, cron_entries, cron_entries.c.name)


def _table_rows(url: str, table, order_by) -> list[dict[str, Any]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [
                dict(row) for row in connection.execute(select(table).order_by(order_by)).mappings()
            ]
    finally:
        engine.dispose()


# InnoDB copies its transactions and lock waits for information_schema (INNODB_TRX,
# innodb_lock_waits) again only when nobody on the server has read them for 0.1 s: a wait
# that asked every 10 ms never saw a lock wait begun after its first look (and starved
# every other test's look on the same server). Ask them no more often than this.
INNODB_VIEWS_EVERY_SECONDS = 0.2


def wait_until(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    *,
    details: Callable[[], object] | None = None,
    every: float = 0.01,
) -> None:
    """Wait until `condition()` holds, asked `every` so many seconds, failing after
    `timeout` seconds; the failure's message says what `details()` returns then (what
    still stands in the way).

    Only for states of another process that send no event: a statement of the
    database server waiting on a lock, a killed process's connections closing.
    Within the tests' own processes, wait on an Event instead.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() >= deadline:
            found = f": {details()}" if details is not None else ""
            raise AssertionError(f"timed out waiting for {what}{found}")
        time.sleep(every)


# Rows made on the server itself, n = 1..count: PostgreSQL's generate_series, a
# recursive CTE elsewhere (MariaDB stops one at max_recursive_iterations, 1000 by default).
_NUMBERS = {
    "postgresql": "SELECT g AS n FROM generate_series(1, :count) AS g",
    "mariadb": "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :count) "
    "SELECT n FROM g",
    "sqlite": "WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < :count) "
    "SELECT n FROM g",
}
_CONCAT = {
    "postgresql": "CAST(:key_prefix || LPAD(CAST(n AS TEXT), 7, '0') || :key_suffix AS VARCHAR)",
    "mariadb": "CONCAT(:key_prefix, LPAD(n, 7, '0'), :key_suffix)",
    "sqlite": "(:key_prefix || printf('%07d', n) || :key_suffix)",
}


def fill_queue(
    url: str,
    queue: str,
    count: int,
    *,
    key_prefix: str = "filler-",
    key_suffix: str = "",
    due_at: int = 0,
) -> None:
    """Add `count` messages to `queue` with one INSERT … SELECT on the database (no HTTP,
    no store): keys `{key_prefix}{n:07d}{key_suffix}`, payload `{}`, due at `due_at` + n ms."""
    backend = make_url(url).get_backend_name()
    backend = "mariadb" if backend in ("mysql", "mariadb") else backend
    quote = "`" if backend == "mariadb" else '"'
    columns = ", ".join(
        f"{quote}{name}{quote}"
        for name in ("pKey", "pKind", "payload", "scheduledAt", "scheduledAtInitially", "createdAt")
    )
    statement = text(
        f"INSERT INTO delayed_queue ({columns}) SELECT {_CONCAT[backend]}, :queue, :payload, "
        f":due_at + n, :due_at + n, :due_at FROM ({_NUMBERS[backend]}) AS numbers"
    )
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            if backend == "mariadb":
                connection.execute(text(f"SET SESSION max_recursive_iterations = {count + 1}"))
            connection.execute(
                statement,
                {
                    "count": count,
                    "queue": queue,
                    "payload": b"{}",
                    "due_at": due_at,
                    "key_prefix": key_prefix,
                    "key_suffix": key_suffix,
                },
            )
    finally:
        engine.dispose()


def plan_of(store: Any, statement: Any, parameters: dict[str, Any]) -> str:
    """The database's plan for `statement` with `parameters` written in, as text."""
    dialect = store.engine.dialect
    compiled = statement.compile(dialect=dialect)
    values = {**compiled.params, **parameters}
    if compiled.positiontup is not None:
        values = tuple(values[name] for name in compiled.positiontup)
    explain = "EXPLAIN QUERY PLAN" if dialect.name == "sqlite" else "EXPLAIN"
    with store.engine.connect() as connection:
        rows = connection.exec_driver_sql(f"{explain} {compiled.string}", values)
        return "\n".join(" | ".join(str(value) for value in row) for row in rows)
