"""Two service instances on one PostgreSQL (or MariaDB) database, their cron managers racing over the same entries."""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from tests.conftest import FakeClock, truncate_all
from tests.helpers import keys_of, poll

pytestmark = pytest.mark.server_databases

TICKS = 24  # four hours of ten-minute ticks


def test_two_replicas_install_every_run_once_and_each_is_delivered_once(server_url):
    truncate_all(server_url)
    clock = FakeClock()
    settings = Settings(database_url=server_url, auto_migrate=False)
    with (
        TestClient(create_app(settings, clock=clock)) as first,
        TestClient(create_app(settings, clock=clock)) as second,
        ThreadPoolExecutor(4) as pool,
    ):
        replicas = [first, second]
        body = {"payload": {"report": 1}, "every": 300}
        assert first.put("/v1/queues/reports/cron/five-minutes", json=body).status_code == 201
        assert second.put("/v1/queues/reports/cron/five-minutes", json=body).json()["outcome"] == (
            "unchanged"
        )
        delivered: Counter[str] = Counter()
        lock = threading.Lock()

        def pass_on(replica: TestClient) -> None:
            replica.portal.call(replica.app.state.cron_manager.run_pass)

        def work(replica: TestClient) -> None:
            while (polled := poll(replica, "reports", max=2))["messages"]:
                with lock:
                    delivered.update(keys_of(polled))
                ack = replica.delete(f"/v1/queues/reports/locks/{polled['lock_id']}")
                assert ack.status_code == 204

        for _ in range(TICKS):
            clock.advance(600)
            # Both managers at once, then both replicas' workers at once.
            list(pool.map(pass_on, replicas + replicas))
            list(pool.map(work, replicas + replicas))

        assert first.app.state.cron_manager.failures == 0
        assert second.app.state.cron_manager.failures == 0
    # Every five minutes for four hours: 48 runs, each delivered exactly once.
    assert len(delivered) == TICKS * 2
    assert set(delivered.values()) == {1}
