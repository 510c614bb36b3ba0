"""Polls of made-up queue names, and made-up methods, leave /metrics and memory as they were."""

from __future__ import annotations

import asyncio
import gc
import sys
from dataclasses import dataclass

import httpx
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.main import create_app
from app.queue import service as service_module
from app.queue.service import SETTINGS_CACHE_SECONDS
from app.storage.schema import upgrade_to_head
from tests.conftest import FakeClock

# The issue saw 40,000 such polls add 12.5 MB to /metrics. The cost of a made-up
# name is now nothing, whatever their number; this many keep the test to seconds
# (a poll costs ~1 ms here, on SQLite), and bench/made_up_queue_names.py drives 40,000
# against a real server.
MADE_UP_NAMES = 4_000
# Allocated blocks that come and go between two measurements (measured: within ±60
# for 3,000 names); before the fix, every made-up name left ~14 blocks behind.
BLOCKS_NOISE = MADE_UP_NAMES // 10
# Bytes /metrics may grow by: counters gaining digits.
EXPOSITION_NOISE = 1024


@dataclass(frozen=True)
class Footprint:
    allocated_blocks: int
    exposition: str  # one object: parsed only once both footprints are taken

    @property
    def series(self) -> frozenset[tuple[str, frozenset]]:
        return frozenset(
            (sample.name, frozenset(sample.labels.items()))
            for family in text_string_to_metric_families(self.exposition)
            for sample in family.samples
        )


async def _footprint(client: httpx.AsyncClient) -> Footprint:
    gc.collect()
    blocks = sys.getallocatedblocks()
    return Footprint(blocks, (await client.get("/metrics")).text)


async def _poll_made_up_names(client: httpx.AsyncClient, prefix: str, count: int) -> None:
    for index in range(count):
        response = await client.post(f"/v1/queues/{prefix}-{index:06d}/poll", json={})
        assert response.json() == {"lock_id": None, "messages": []}


async def _made_up_names(url: str) -> tuple[Footprint, Footprint]:
    clock = FakeClock()
    app = create_app(Settings(database_url=url, auto_migrate=False), clock=clock)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client,
    ):
        offered = await client.put("/v1/queues/real/messages/k", json={"payload": 1, "delay": 60})
        assert offered.status_code == 201

        async def forget_settings_read_until_now() -> None:
            clock.advance(SETTINGS_CACHE_SECONDS)  # the settings read so far expire;
            await client.post("/v1/queues/real/poll", json={})  # the next read forgets them

        # Every code path once (the measurement's too), and every series it will see.
        await _poll_made_up_names(client, "warm-up", 1000)
        await forget_settings_read_until_now()
        await _footprint(client)
        before = await _footprint(client)

        await _poll_made_up_names(client, "made-up", MADE_UP_NAMES)
        await forget_settings_read_until_now()
        return before, await _footprint(client)


def test_polls_of_made_up_queue_names_leave_metrics_and_memory_flat(tmp_path):
    url = f"sqlite:///{tmp_path / 'names.db'}"
    upgrade_to_head(url)
    before, after = asyncio.run(_made_up_names(url))

    assert after.series == before.series
    assert len(after.exposition) - len(before.exposition) < EXPOSITION_NOISE
    assert after.allocated_blocks - before.allocated_blocks < BLOCKS_NOISE, (
        f"{after.allocated_blocks - before.allocated_blocks} blocks more "
        f"after {MADE_UP_NAMES} made-up names"
    )


def test_made_up_methods_are_labelled_other(tmp_path):
    url = f"sqlite:///{tmp_path / 'methods.db'}"
    upgrade_to_head(url)
    with TestClient(create_app(Settings(database_url=url, auto_migrate=False))) as client:
        for index in range(3):
            assert client.request(f"MADEUP{index}", "/v1/queues/q/poll").status_code == 405
            assert client.request(f"MADEUP{index}", "/nowhere").status_code == 404
        methods = {
            sample.labels["method"]
            for family in text_string_to_metric_families(client.get("/metrics").text)
            for sample in family.samples
            if sample.name.startswith("hourglass_http_request_duration_seconds")
        }
    assert methods == {"other"}  # /metrics itself is timed once it has answered


def test_the_settings_cache_keeps_the_latest_reads_when_full(tmp_path, monkeypatch):
    monkeypatch.setattr(service_module, "_SETTINGS_CACHE_SIZE", 3)
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    upgrade_to_head(url)
    app = create_app(Settings(database_url=url, auto_migrate=False), clock=FakeClock())
    with TestClient(app) as client:
        for index in range(5):  # none expires: the clock stands still
            assert client.post(f"/v1/queues/made-up-{index}/poll", json={}).status_code == 200
        assert list(app.state.service._settings) == ["made-up-2", "made-up-3", "made-up-4"]
