"""Forgetting a queue or a cron entry name removes the series made for it, and only those:
prometheus-client up to 0.21.1 raises KeyError when asked to remove a label set it never
made (a 500 inside /metrics, the queue half forgotten)."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.parser import text_string_to_metric_families

from app.domain.errors import StorageUnavailable
from app.domain.messages import Outcome, QueueStats
from app.metrics import Metrics
from app.metrics.collectors import ERROR_KINDS
from app.metrics.gauges import QUEUE_GAUGES_SECONDS
from app.metrics.labels import IDLE_QUEUE_SECONDS
from tests.conftest import FakeClock


def _remove_as_before_0_22(self: MetricWrapperBase, *label_values: object) -> None:
    """MetricWrapperBase.remove as prometheus-client 0.21.1 has it: KeyError for a label
    set never made."""
    with self._lock:
        del self._metrics[tuple(str(value) for value in label_values)]


@pytest.fixture
def strict_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(MetricWrapperBase, "remove", _remove_as_before_0_22)


def _refresh(metrics: Metrics, holding: list[str], configured: list[str], entries) -> None:
    async def stats() -> list[QueueStats]:
        return [QueueStats(queue, 1, 0, 1, 0, None, None) for queue in holding]

    async def configured_queues() -> list[str]:
        return configured

    async def cron_entries() -> list[tuple[str, str]]:
        return entries

    asyncio.run(metrics.refresh_queues(stats, configured_queues, cron_entries))


def _labels(metrics: Metrics, metric: str) -> list[dict[str, str]]:
    return [
        sample.labels
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
        if sample.name == metric
    ]


def test_forgetting_removes_only_the_series_made(strict_removal):
    clock = FakeClock()
    metrics = Metrics(clock=clock)
    metrics.offered("offered-only", [Outcome.CREATED])  # no poll, ack or dead letter series
    metrics.cron_runs_installed("timed", "gone", 1)
    metrics.cron_runs_installed("timed", "kept", 2)
    # "configured-only" holds settings and never had an event: no series at all.
    _refresh(metrics, ["timed"], ["configured-only"], [("timed", "kept")])

    clock.advance(IDLE_QUEUE_SECONDS)
    _refresh(metrics, ["timed"], [], [("timed", "kept")])
    assert _labels(metrics, "hourglass_messages_offered_total") == []
    assert _labels(metrics, "hourglass_cron_runs_installed_total") == [
        {"queue": "timed", "name": "kept"}
    ]

    clock.advance(IDLE_QUEUE_SECONDS)
    _refresh(metrics, [], [], [])
    assert _labels(metrics, "hourglass_cron_runs_installed_total") == []


def test_every_error_kind_starts_at_zero():
    # increase() reads nothing in a series that first shows up at 1: the alerts on
    # errors see the first failure only because every kind is there from the start.
    labels = _labels(Metrics(clock=FakeClock()), "hourglass_errors_total")
    assert sorted(label["kind"] for label in labels) == sorted(ERROR_KINDS)
    assert "cron_pass" in ERROR_KINDS and "database_unavailable" in ERROR_KINDS


def _ready(metrics: Metrics) -> float:
    text = metrics.exposition().decode()
    (value,) = [
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "hourglass_ready"
    ]
    return value


def test_the_ready_gauge_changes_only_once_the_database_has_answered():
    clock = FakeClock()
    metrics = Metrics(clock=clock)

    async def nothing() -> list:
        return []

    async def scenario() -> None:
        async def ready() -> bool:
            return True

        await metrics.refresh_queues(nothing, nothing, nothing, read_ready=ready)
        assert _ready(metrics) == 1
        clock.advance(QUEUE_GAUGES_SECONDS)
        asking, answer = asyncio.Event(), asyncio.Event()

        async def gone() -> bool:
            asking.set()
            await answer.wait()
            raise StorageUnavailable("the database does not answer")

        refresh = asyncio.create_task(
            metrics.refresh_queues(nothing, nothing, nothing, read_ready=gone)
        )
        await asyncio.wait_for(asking.wait(), 5)
        assert _ready(metrics) == 1  # a scrape meanwhile reads the last answer
        answer.set()
        await asyncio.wait_for(refresh, 5)
        assert _ready(metrics) == 0

    asyncio.run(scenario())
