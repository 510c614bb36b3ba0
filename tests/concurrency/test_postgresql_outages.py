"""PostgreSQL going away under the service: it answers 503, then recovers by itself."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.config import Settings
from app.main import create_app
from tests.conftest import FakeClock, truncate_all
from tests.support.helpers import poll, put

pytestmark = pytest.mark.postgresql_only


def _terminate_other_backends(url: str) -> int:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            return connection.execute(
                text(
                    # With a timeout, pg_terminate_backend waits until the backend has exited.
                    "SELECT count(pg_terminate_backend(pid, 10000)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar()
    finally:
        engine.dispose()


def test_killed_connections_are_replaced_without_a_restart(postgresql_url):
    truncate_all(postgresql_url)
    with TestClient(create_app(Settings(database_url=postgresql_url), clock=FakeClock())) as client:
        for index in range(5):
            assert put(client, "q", f"before-{index}", index).status_code == 201
        assert _terminate_other_backends(postgresql_url) >= 1
        # Every pooled connection is dead; each is found out on checkout and replaced.
        for index in range(5):
            assert put(client, "q", f"after-{index}", index).status_code == 201
        assert len(poll(client, "q", max=100)["messages"]) == 10
        assert client.get("/readyz").status_code == 200
