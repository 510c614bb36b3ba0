"""The service's metrics: its collectors (app/metrics/collectors.py) on an injectable registry,
fed by the services' events, under the cap on queue labels (app/metrics/labels.py), with the
gauges read at scrape time (app/metrics/gauges.py) and several processes' files
(app/metrics/multiprocess.py)."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Sequence
from functools import partial

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from app.clock import Clock, SystemClock
from app.domain.messages import Lease, Limit, Outcome, QueueStats
from app.domain.table_health import TableHealth
from app.metrics.collectors import QueueCollectors, ServiceCollectors
from app.metrics.gauges import BuildInfo, ScrapeGauges
from app.metrics.labels import QueueLabels, QueueSeries
from app.metrics.multiprocess import OpenConnections, check_multiprocess, exposed_registry


class Metrics:
    """The service's metrics. One instance per app, so tests get fresh counters.

    With `multiprocess_dir` (`hourglass serve --workers N`, N > 1), counters, histograms
    and the open connections go to prometheus-client's files in that directory, where
    every worker writes its own and a scrape adds them up; what is read at scrape time
    (the release, the queue gauges from the database) comes from the scraping process
    alone, so it is never counted N times.
    """

    content_type = CONTENT_TYPE_LATEST

    def __init__(
        self,
        registry: CollectorRegistry | None = None,
        clock: Clock | None = None,
        *,
        multiprocess_dir: str | None = None,
    ) -> None:
        self.registry = registry or CollectorRegistry()
        self.clock = clock or SystemClock()
        if multiprocess_dir is not None:
            check_multiprocess()
        build = BuildInfo()
        self.registry.register(build)
        self._by_queue = QueueCollectors(self.registry)
        self._series = QueueSeries()
        self.queues = QueueLabels(
            self.clock,
            forget_queue=self._series.forget_queue,
            forget_entry=partial(self._series.forget, self._by_queue.cron_runs_installed),
        )
        self._gauges = ScrapeGauges(self.clock, self.queues, self.error)
        self.registry.register(self._gauges.queues)
        self.registry.register(self._gauges.table_health)
        self._service = ServiceCollectors(self.registry)
        self.http_duration = self._service.http_duration
        self._connections = OpenConnections(
            self._service.connections_open, multiprocess=multiprocess_dir is not None
        )
        self._exposed = self.registry
        if multiprocess_dir is not None:
            self._exposed = exposed_registry(
                multiprocess_dir, build, [self._gauges.queues, self._gauges.table_health]
            )

    # -- what the queue service reports (QueueEvents) ---------------------------------

    def offered(self, queue: str, outcomes: Sequence[Outcome]) -> None:
        label = self.queues.label_for_write(queue)
        for outcome, count in Tally(outcomes).items():
            self._series.of(self._by_queue.offered, label, outcome.value).inc(count)

    def polled(self, queue: str, lease: Lease | None, now: int) -> None:
        if lease is None:
            self._series.of(
                self._by_queue.polls, self.queues.label_for_empty_poll(queue), "empty"
            ).inc()
            return
        label = self.queues.label_for_write(queue)
        self._series.of(self._by_queue.polls, label, "messages").inc()
        lateness = self._series.of(self._by_queue.lateness, label)
        firsts = 0
        for delivery in lease.deliveries:  # one pass: polls of 100 are the hot path
            if not delivery.redelivery:
                firsts += 1
                lateness.observe(max(0, now - delivery.message.scheduled_at_initially) / 1000)
        redeliveries = len(lease.deliveries) - firsts
        if firsts:
            self._series.of(self._by_queue.delivered, label, "first").inc(firsts)
        if redeliveries:
            self._series.of(self._by_queue.delivered, label, "redelivery").inc(redeliveries)

    def acknowledged(self, queue: str, count: int) -> None:
        self._series.of(self._by_queue.acknowledged, self.queues.label_for_write(queue)).inc(count)

    def released(self, queue: str, count: int) -> None:
        self._series.of(self._by_queue.released, self.queues.label_for_write(queue)).inc(count)

    def dead_lettered(self, queue: str, count: int) -> None:
        self._series.of(self._by_queue.dead_lettered, self.queues.label_for_write(queue)).inc(count)

    def expired(self, queue: str, count: int) -> None:
        self._series.of(self._by_queue.expired, self.queues.label_for_write(queue)).inc(count)

    def held_back(self, queue: str, limit: Limit) -> None:
        # Only a queue with settings of its own has a limit: it has series of its own.
        self._series.of(
            self._by_queue.held_back, self.queues.label_for_write(queue), limit.value
        ).inc()

    # -- what the push dispatcher reports (PushEvents) ------------------------------------

    def pushed(self, queue: str, result: str, seconds: float) -> None:
        label = self.queues.label_for_write(queue)
        self._series.of(self._by_queue.push_requests, label, str(result)).inc()
        self._series.of(self._by_queue.push_duration, label).observe(seconds)

    def cron_runs_installed(self, queue: str, name: str, count: int) -> None:
        queue_label, name_label = self.queues.labels_for_cron_runs(queue, name)
        self._series.of(self._by_queue.cron_runs_installed, queue_label, name_label).inc(count)

    # -- scrape-time gauges -----------------------------------------------------------

    async def refresh_queues(
        self,
        read_stats: Callable[[], Awaitable[list[QueueStats]]],
        read_configured: Callable[[], Awaitable[list[str]]],
        read_cron_entries: Callable[[], Awaitable[list[tuple[str, str]]]],
        read_ready: Callable[[], Awaitable[bool]] | None = None,
        read_table_health: Callable[[], Awaitable[TableHealth]] | None = None,
    ) -> None:
        """Read the gauges of a scrape from the database, unless that was read moments
        ago (ScrapeGauges.refresh, app/metrics/gauges.py)."""
        await self._gauges.refresh(
            read_stats, read_configured, read_cron_entries, read_ready, read_table_health
        )

    def error(self, kind: str) -> None:
        self._service.errors.labels(kind=kind).inc()

    # -- what the server reports (app.server.ConnectionEvents) --------------------------

    def connection_dropped(self, reason: str) -> None:
        self._service.connections_dropped.labels(reason=reason).inc()

    def watch_connections(self, open_connections: Callable[[], int]) -> None:
        self._connections.watch(open_connections)

    def sample_connections(self) -> None:
        """Write this process's count of open connections for the other processes' scrapes."""
        self._connections.sample()

    # -- what the link to other processes reports (storage's PeerEvents) ---------------

    def listener_connected(self, connected: bool) -> None:
        self._service.listener_connected.set(1 if connected else 0)

    def listener_reconnected(self) -> None:
        self._service.listener_reconnects.inc()

    def peers_told(self, names: int) -> None:
        self._service.peers_told.inc(names)

    def statement_sent(self, _statement: str = "") -> None:
        """One more statement sent to the database (the store calls it after each, with
        its text)."""
        self._service.database_statements.inc()

    def exposition(self) -> bytes:
        """Every collector's samples in the Prometheus text format (with several processes,
        added up across them)."""
        return generate_latest(self._exposed)
