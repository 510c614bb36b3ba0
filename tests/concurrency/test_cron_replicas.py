"""Two service instances on one PostgreSQL (or MariaDB) database, their cron managers racing over the same entries."""

from __future__ import annotations

import json
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.domain.cron import CronEntry, run_key
from app.domain.messages import IfExists, Offer
from app.domain.schedule import Schedule, config_hash
from app.main import create_app
from app.storage.blocking import create_blocking_storage
from tests.conftest import START_MS, FakeClock, truncate_all
from tests.support.helpers import keys_of, poll, stored_rows

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


def test_replicas_installing_runs_of_one_entry_at_once_keep_it_within_its_bound(server_url):
    """Two replicas whose clocks differ by 10 s install runs of one entry at the same
    moment: they take turns on the entry's row, so the second counts the first's runs
    and the entry keeps its limit (reading at once, each would add its own 10)."""
    truncate_all(server_url)
    settings = Settings(database_url=server_url, auto_migrate=False)
    first, second = create_blocking_storage(settings), create_blocking_storage(settings)
    schedule = Schedule(every=1)
    entry = CronEntry(
        queue="reports",
        name="tick",
        schedule=json.dumps(schedule.as_json(), sort_keys=True),
        payload=b"1",
        config_hash=config_hash(schedule, b"1"),
        lookahead_ms=None,
        created_at=START_MS,
        updated_at=START_MS,
    )
    first.cron.install(entry)
    first_has_read, second_has_read = threading.Event(), threading.Event()

    def after_reading_runs(event: threading.Event, then=None):
        def listener(statement: str) -> None:
            if statement.startswith("SELECT delayed_queue.") and " LIKE " in statement:
                event.set()
                if then is not None:
                    # Taking turns, the second replica cannot read before this one ends.
                    then.wait(timeout=2)

        return listener

    first.listen_statements(after_reading_runs(first_has_read, second_has_read))
    second.listen_statements(after_reading_runs(second_has_read))

    def install(store, now: int) -> int | None:
        runs = [
            Offer(
                run_key("tick", entry.config_hash, now + n * 1000),
                b"1",
                now + n * 1000,
                IfExists.IGNORE,
            )
            for n in range(1, 11)
        ]
        return store.cron.install_runs(entry, runs, now, limit=10, keep_until=now + 3_600_000)

    try:
        with ThreadPoolExecutor(2) as pool:
            early = pool.submit(install, first, START_MS)
            assert first_has_read.wait(timeout=10)
            late = pool.submit(install, second, START_MS + 10_000)
            assert early.result(timeout=30) == 10
            assert late.result(timeout=30) == 0
        assert len(stored_rows(server_url)) == 10
    finally:
        first.close()
        second.close()
