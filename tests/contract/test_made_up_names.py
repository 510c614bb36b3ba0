"""Polls of made-up queue names, and cron entries installed and uninstalled under
made-up names, leave /metrics and the process's memory as they were, on every database."""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from app.metrics.labels import IDLE_QUEUE_SECONDS
from app.queue.settings import SETTINGS_CACHE_SECONDS
from tests.conftest import FakeClock

# 40,000 such polls used to add 12.5 MB to /metrics. The cost of a made-up
# name is now nothing, whatever their number; this many keep the test to seconds on
# each database (a poll costs 1-2 ms here), and bench/made_up_queue_names.py drives
# 40,000 against a real server.
MADE_UP_NAMES = 2_000
# Allocated blocks that come and go between two measurements, whatever the number
# of names (measured after 4,000: -214 to +31 over the three databases); before the
# fix, every made-up name left ~14 blocks behind (28,000 here).
BLOCKS_NOISE = 500
# Bytes /metrics may grow by: counters gaining digits.
EXPOSITION_NOISE = 1024
# Cron entries installed and uninstalled under made-up names in a queue that holds a
# message: before the fix, each left its hourglass_cron_runs_installed_total series
# for good (a series goes only when its whole queue holds nothing). Their blocks are
# bounded at half a block per entry: what an entry would leave behind is one block or
# more each (a series is several; only its name kept in the labels' dict: 0.8 to 1.4
# a name), where the noise does not grow with their number (-147 to +440 after 300,
# 1,000 or 2,000 entries alike, up to 529 on a loaded machine).
MADE_UP_ENTRIES = 2_000
ENTRY_BLOCKS_BOUND = MADE_UP_ENTRIES // 2


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
    """The blocks allocated, the fewest of three counts: a background loop (the expiry
    sweep, the groups' keeper) caught mid-pass holds a few hundred blocks for a moment,
    where what made-up names would leave behind stays in every count."""
    counts = []
    for _ in range(3):
        gc.collect()
        counts.append(sys.getallocatedblocks())
        await asyncio.sleep(0)  # let a pass in flight finish and drop what it held
    return Footprint(min(counts), (await client.get("/metrics")).text)


@asynccontextmanager
async def _app_holding_a_message(settings) -> AsyncIterator[tuple[httpx.AsyncClient, FakeClock]]:
    """The app on a fake clock, through a client, with queue `real` holding one message."""
    clock = FakeClock()
    app = create_app(settings, clock=clock)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client,
    ):
        offered = await client.put("/v1/queues/real/messages/k", json={"payload": 1, "delay": 60})
        assert offered.status_code == 201
        yield client, clock


async def _poll_made_up_names(client: httpx.AsyncClient, prefix: str, count: int) -> None:
    for index in range(count):
        # Every fifth a long poll: it waits on the notifier, which must forget it too.
        body = {"wait": 0.001} if index % 5 == 0 else {}
        response = await client.post(f"/v1/queues/{prefix}-{index:06d}/poll", json=body)
        assert response.json() == {"lock_id": None, "messages": []}


async def _made_up_names(settings) -> tuple[Footprint, Footprint]:
    async with _app_holding_a_message(settings) as (client, clock):

        async def forget_settings_read_until_now() -> None:
            clock.advance(SETTINGS_CACHE_SECONDS)  # the settings read so far expire;
            await client.post("/v1/queues/real/poll", json={})  # the next read forgets them

        # Every code path once (the measurement's too), and every series it will see.
        await _poll_made_up_names(client, "warm-up", 300)
        await forget_settings_read_until_now()
        await _footprint(client)
        before = await _footprint(client)

        await _poll_made_up_names(client, "made-up", MADE_UP_NAMES)
        await forget_settings_read_until_now()
        return before, await _footprint(client)


def test_polls_of_made_up_queue_names_leave_metrics_and_memory_flat(settings):
    before, after = asyncio.run(_made_up_names(settings))

    assert after.series == before.series
    assert len(after.exposition) - len(before.exposition) < EXPOSITION_NOISE
    assert after.allocated_blocks - before.allocated_blocks < BLOCKS_NOISE, (
        f"{after.allocated_blocks - before.allocated_blocks} blocks more "
        f"after {MADE_UP_NAMES} made-up names"
    )


async def _install_and_uninstall_made_up_entries(
    client: httpx.AsyncClient, prefix: str, count: int
) -> None:
    for index in range(count):
        path = f"/v1/queues/real/cron/{prefix}-{index:04d}"
        installed = await client.put(path, json={"payload": 1, "every": 3600})
        assert installed.status_code == 201, installed.text
        assert (await client.delete(path)).status_code == 204


async def _made_up_cron_entries(settings) -> tuple[Footprint, Footprint]:
    async with _app_holding_a_message(settings) as (client, clock):

        async def footprint_once_idle() -> Footprint:
            clock.advance(IDLE_QUEUE_SECONDS)  # every name uninstalled so far is idle,
            await client.get("/metrics")  # and a scrape forgets it
            return await _footprint(client)

        # Every code path once (the measurement's too), and every series it will see;
        # more paths than the client's URL parsing caches (urllib's 128).
        await _install_and_uninstall_made_up_entries(client, "warm-up", 150)
        await footprint_once_idle()
        before = await footprint_once_idle()

        await _install_and_uninstall_made_up_entries(client, "made-up", MADE_UP_ENTRIES)
        made_up = await _footprint(client)  # not idle yet: the series are still there
        assert (
            sum(name == "hourglass_cron_runs_installed_total" for name, _ in made_up.series)
            == MADE_UP_ENTRIES
        )
        return before, await footprint_once_idle()


def test_cron_entries_installed_and_uninstalled_under_made_up_names_leave_metrics_flat(settings):
    before, after = asyncio.run(_made_up_cron_entries(settings))

    assert after.series == before.series
    assert len(after.exposition) - len(before.exposition) < EXPOSITION_NOISE
    assert after.allocated_blocks - before.allocated_blocks < ENTRY_BLOCKS_BOUND, (
        f"{after.allocated_blocks - before.allocated_blocks} blocks more "
        f"after {MADE_UP_ENTRIES} made-up cron entries"
    )
