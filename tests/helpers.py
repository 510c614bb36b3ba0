"""Small helpers shared by the HTTP tests."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select

from app.api.schemas import format_timestamp
from app.storage.tables import delayed_queue, delivery_history, queue_settings


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
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(select(delayed_queue).order_by(delayed_queue.c.id)).mappings()
            return [dict(row) for row in rows]
    finally:
        engine.dispose()


def history_rows(url: str) -> list[dict[str, Any]]:
    """Every row of the delivery history, oldest first, straight from the database."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            rows = connection.execute(
                select(delivery_history).order_by(delivery_history.c.id)
            ).mappings()
            return [{k: v for k, v in row.items() if k != "id"} for row in rows]
    finally:
        engine.dispose()


def settings_rows(url: str) -> list[dict[str, Any]]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return [dict(row) for row in connection.execute(select(queue_settings)).mappings()]
    finally:
        engine.dispose()
