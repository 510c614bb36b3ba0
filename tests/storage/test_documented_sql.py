"""The statements PostgreSQL executes are the documented ones (decision 3).

A statement-level trigger records `current_query()`, the text PostgreSQL
received, for every statement that writes to the message table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.config import Settings
from app.main import create_app
from tests.conftest import FakeClock, truncate_all
from tests.support.helpers import poll, put

pytestmark = pytest.mark.postgresql_only

_INSTALL = [
    "CREATE TABLE test_captured_sql (id bigserial PRIMARY KEY, query text NOT NULL)",
    """
    CREATE FUNCTION test_capture_sql() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO test_captured_sql (query) VALUES (current_query());
        RETURN NULL;
    END $$
    """,
    """
    CREATE TRIGGER test_capture_sql AFTER INSERT OR UPDATE OR DELETE ON delayed_queue
    FOR EACH STATEMENT EXECUTE FUNCTION test_capture_sql()
    """,
]
_REMOVE = [
    "DROP TRIGGER IF EXISTS test_capture_sql ON delayed_queue",
    "DROP FUNCTION IF EXISTS test_capture_sql()",
    "DROP TABLE IF EXISTS test_captured_sql",
]


@pytest.fixture
def captured(postgresql_url: str) -> Iterator[callable]:
    truncate_all(postgresql_url)
    engine = create_engine(postgresql_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        for statement in _REMOVE + _INSTALL:
            connection.execute(text(statement))

    def read() -> list[str]:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT query FROM test_captured_sql ORDER BY id"))
            return [" ".join(row.query.split()) for row in rows]

    try:
        yield read
    finally:
        with engine.connect() as connection:
            for statement in _REMOVE:
                connection.execute(text(statement))
        engine.dispose()


def test_postgresql_executes_the_documented_statements(postgresql_url, captured):
    with TestClient(create_app(Settings(database_url=postgresql_url), clock=FakeClock())) as client:
        put(client, "q", "k", 1)
        put(client, "q", "k", 2)  # the update path
        lock = poll(client, "q", max=1)["lock_id"]
        client.delete(f"/v1/queues/q/locks/{lock}")
        client.post("/v1/queues/q/batch", json={"messages": [{"key": "b", "payload": 1}]})
        poll(client, "q", max=10)

    statements = captured()
    inserts = [s for s in statements if s.startswith("INSERT INTO delayed_queue")]
    updates = [s for s in statements if s.startswith("UPDATE delayed_queue")]
    # With the history recorded (the default), an acknowledgement is the documented DELETE
    # inside one statement that also writes its rows to delivery_history.
    deletes = [s for s in statements if "DELETE FROM delayed_queue" in s]

    assert inserts and all('ON CONFLICT ("pKey", "pKind") DO NOTHING' in s for s in inserts)
    offer_update = [s for s in updates if '"scheduledAtInitially" =' in s and '"createdAt" =' in s]
    assert offer_update, (
        "the update path is a compare-and-swap on scheduledAtInitially and createdAt"
    )
    polls = [s for s in updates if "FOR UPDATE SKIP LOCKED" in s]
    assert len(polls) == 2, updates
    assert all('ORDER BY delayed_queue."scheduledAt"' in s and "LIMIT" in s for s in polls)
    assert any('"lockUuid" =' in s for s in deletes), deletes
    assert all(
        s.startswith("WITH gone AS (DELETE FROM delayed_queue")
        and "INSERT INTO delivery_history" in s
        for s in deletes
    ), deletes


def _blocked_queries(engine) -> list[str]:
    with engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT query FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
        return [" ".join(row.query.split()) for row in rows]


def test_the_update_path_locks_the_row_with_select_for_update(postgresql_url):
    """SELECTs fire no trigger: catch the offer's SELECT … FOR UPDATE waiting on a row lock."""
    truncate_all(postgresql_url)
    engine = create_engine(postgresql_url)
    try:
        with TestClient(
            create_app(Settings(database_url=postgresql_url), clock=FakeClock())
        ) as client:
            put(client, "q", "k", 1)
            with engine.connect() as holder, holder.begin():
                holder.execute(
                    text("""SELECT 1 FROM delayed_queue WHERE "pKey" = 'k' FOR UPDATE""")
                )
                with ThreadPoolExecutor(1) as pool:
                    update = pool.submit(put, client, "q", "k", 2)
                    deadline = time.monotonic() + 30
                    while not (blocked := _blocked_queries(engine)) and time.monotonic() < deadline:
                        pass  # the offer is on its way to the lock: look again
                    assert len(blocked) == 1, "the offer never waited on the row lock"
                    assert blocked[0].startswith("SELECT")
                    assert "FROM delayed_queue" in blocked[0] and blocked[0].endswith("FOR UPDATE")
                    holder.rollback()
                    assert update.result(timeout=30).json()["outcome"] == "updated"
    finally:
        engine.dispose()
