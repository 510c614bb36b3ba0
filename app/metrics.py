"""Prometheus collectors on an injectable registry."""

from __future__ import annotations

import time
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    Info,
    generate_latest,
)

from app import __version__
from app.queue.errors import StorageUnavailable
from app.queue.models import Lease, Outcome, QueueStats
from app.storage.store import Store

# Queue gauges come from the database at scrape time, at most this often.
QUEUE_GAUGES_SECONDS = 5.0
# Seconds from due to first delivery: from on time to an outage's worth late.
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)


class Metrics:
    """The service's collectors. One instance per app, so tests get fresh counters."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        Info("hourglass_build", "The running release", registry=self.registry).info(
            {"version": __version__}
        )
        self.database_statements = Counter(
            "hourglass_database_statements",
            "Statements sent to the database (what an idle service costs the database, too)",
            registry=self.registry,
        )

        self.cron_runs_installed = Counter(
            "hourglass_cron_runs_installed",
            "Cron runs installed as messages (each run once, whichever replica installs it)",
            ["queue", "name"],
            registry=self.registry,
        )
        self.errors = Counter(
            "hourglass_errors",
            "Failures by kind: database_unavailable (a request answered 503), cron_pass, "
            "cron_entry, history_prune, metrics_queue_gauges",
            ["kind"],
            registry=self.registry,
        )

        self._offered = Counter(
            "hourglass_messages_offered",
            "Offers, by outcome",
            ["queue", "outcome"],
            registry=self.registry,
        )
        self._delivered = Counter(
            "hourglass_messages_delivered",
            "Messages handed to workers, first or redelivery",
            ["queue", "delivery"],
            registry=self.registry,
        )
        self._acknowledged = Counter(
            "hourglass_messages_acknowledged",
            "Messages deleted by acknowledgement",
            ["queue"],
            registry=self.registry,
        )
        self._dead_lettered = Counter(
            "hourglass_messages_dead_lettered",
            "Messages moved to their dead-letter queue after their last allowed delivery",
            ["queue"],
            registry=self.registry,
        )
        self._polls = Counter(
            "hourglass_polls",
            "Polls answered, with messages or empty",
            ["queue", "result"],
            registry=self.registry,
        )
        self._lateness = Histogram(
            "hourglass_delivery_lateness_seconds",
            "First delivery minus the time it was due",
            ["queue"],
            buckets=LATENESS_BUCKETS,
            registry=self.registry,
        )
        self.queue_messages = Gauge(
            "hourglass_queue_messages",
            "Messages in the queue by state (read at scrape time)",
            ["queue", "state"],
            registry=self.registry,
        )
        self.oldest_ready_age = Gauge(
            "hourglass_queue_oldest_ready_age_seconds",
            "How long the oldest ready message has waited (0 when none is ready)",
            ["queue"],
            registry=self.registry,
        )
        self.http_duration = Histogram(
            "hourglass_http_request_duration_seconds",
            "Requests by route template",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self._connections_dropped = Counter(
            "hourglass_connections_dropped",
            "Client connections the service closed: head_timeout (no request head in time), "
            "body_timeout (no whole body in time: answered 408), evicted (waiting for a head, "
            "at the total cap, for a newer one), client_cap and server_cap (refused on arrival)",
            ["reason"],
            registry=self.registry,
        )
        self._connections_open = Gauge(
            "hourglass_connections_open", "Client connections open", registry=self.registry
        )
        self._queue_gauges_at = float("-inf")

    # -- what the queue service reports (QueueEvents) ---------------------------------

    def offered(self, queue: str, outcomes: Sequence[Outcome]) -> None:
        for outcome, count in Tally(outcomes).items():
            self._offered.labels(queue=queue, outcome=outcome.value).inc(count)

    def polled(self, queue: str, lease: Lease | None, now: int) -> None:
        if lease is None:
            self._polls.labels(queue=queue, result="empty").inc()
            return
        self._polls.labels(queue=queue, result="messages").inc()
        lateness = self._lateness.labels(queue=queue)
        firsts = 0
        for delivery in lease.deliveries:  # one pass: polls of 100 are the hot path
            if not delivery.redelivery:
                firsts += 1
                lateness.observe(max(0, now - delivery.message.scheduled_at_initially) / 1000)
        redeliveries = len(lease.deliveries) - firsts
        if firsts:
            self._delivered.labels(queue=queue, delivery="first").inc(firsts)
        if redeliveries:
            self._delivered.labels(queue=queue, delivery="redelivery").inc(redeliveries)

    def acknowledged(self, queue: str, count: int) -> None:
        self._acknowledged.labels(queue=queue).inc(count)

    def dead_lettered(self, queue: str, count: int) -> None:
        self._dead_lettered.labels(queue=queue).inc(count)

    # -- scrape-time gauges -----------------------------------------------------------

    async def refresh_queue_gauges(
        self, read: Callable[[], Awaitable[list[QueueStats]]], now: int
    ) -> None:
        """Set the queue gauges from the database, unless they were set moments ago.

        A scrape storm costs the database one query per QUEUE_GAUGES_SECONDS; while
        the database is down the gauges keep their last values.
        """
        if time.monotonic() - self._queue_gauges_at < QUEUE_GAUGES_SECONDS:
            return
        self._queue_gauges_at = time.monotonic()
        try:
            queues = await read()
        except StorageUnavailable:
            self.error("metrics_queue_gauges")
            return
        self.queue_messages.clear()
        self.oldest_ready_age.clear()
        for stats in queues:
            for state in ("ready", "scheduled", "leased"):
                self.queue_messages.labels(queue=stats.queue, state=state).set(
                    getattr(stats, state)
                )
            waited = 0 if stats.oldest_ready_at is None else max(0, now - stats.oldest_ready_at)
            self.oldest_ready_age.labels(queue=stats.queue).set(waited / 1000)

    def cron_runs_installed_by(self, queue: str, name: str, count: int) -> None:
        self.cron_runs_installed.labels(queue=queue, name=name).inc(count)

    def error(self, kind: str) -> None:
        self.errors.labels(kind=kind).inc()

    # -- what the server reports (app.server.ConnectionEvents) --------------------------

    def connection_dropped(self, reason: str) -> None:
        self._connections_dropped.labels(reason=reason).inc()

    def watch_connections(self, open_connections: Callable[[], int]) -> None:
        self._connections_open.set_function(open_connections)

    def count_statements(self, store: Store) -> None:
        """Count every statement `store` sends."""
        store.listen_statements(self.database_statements.inc)

    def exposition(self) -> bytes:
        """Every collector's samples in the Prometheus text format."""
        return generate_latest(self.registry)
