"""Small helpers shared by the tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select

from app.api.schemas import format_timestamp
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


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until `condition()` holds, failing after `timeout` seconds.

    Only for states of another process that send no event: a statement of the
    database server waiting on a lock, a killed process's connections closing.
    Within the tests' own processes, wait on an Event instead.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
