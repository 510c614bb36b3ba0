"""Prometheus collectors on an injectable registry, with a bounded set of queue labels.

Series labelled with a queue exist only for queues known to hold something: the
database shows them holding messages, settings or cron entries (read with the
queue gauges, at scrape time), or something was written to them here (an offer,
a delivery, an acknowledgement, a release, a dead letter, a cron run). An empty
poll of any other queue counts under `queue="_other"`, so polls of made-up names
leave nothing behind (issue 14: 40,000 of them added 12.5 MB to every scrape, for good).

A known queue that holds nothing and has seen no event for IDLE_QUEUE_SECONDS
loses its series at the next scrape; so does a cron entry name (the `name` label of
hourglass_cron_runs_installed) that the database no longer stores, whichever
replica uninstalled the entry, once no runs were installed for it as long. Their
counters stood still that long, so every scraper has read their last values; if
the queue or the name is used again, its counters start again from 0, as after a
restart, which rate() and increase() read as a counter reset. The queues with series that the last read of the database did not
show holding anything are at most MAX_QUEUES_NOT_HOLDING; past it, the events of
further queues count under `_other` too, so memory stays bounded even when
nothing scrapes. Cron entry names with series that the last read did not show
stored are at most MAX_CRON_ENTRIES_NOT_STORED in all; past it, the runs of
further names count under `name="_other"` of their queue. (Before the first scrape
of a replica, every name counts as not stored.)
"""

from __future__ import annotations

import threading
import warnings
from collections import Counter as Tally
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    values,
)
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector

from app import __version__
from app.clock import Clock, SystemClock
from app.domain.errors import StorageUnavailable
from app.domain.messages import Lease, Limit, Outcome, QueueStats
from app.domain.table_health import TableHealth
from app.metrics.table_health import TableHealthGauges

# Queue gauges come from the database at scrape time, at most this often.
QUEUE_GAUGES_SECONDS = 5.0
# Seconds from due to first delivery: from on time to an outage's worth late.
LATENESS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600)
# Seconds a push request takes: from a local endpoint to the longest timeout (300 s).
PUSH_DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
# The queue label of what no queue of its own counts: no queue can be named so
# (queue names begin with a letter or a digit).
OTHER_QUEUES = "_other"
# A queue that holds nothing keeps its series this long after its last event:
# Prometheus's staleness window, the longest scrape interval it works well with,
# so every scraper has read the last values before they go.
IDLE_QUEUE_SECONDS = 300.0
# Queues with series that the last read of the database did not show holding
# anything (written to since, or drained but still polled). A queue's series take
# ~0.7 KB when it is only offered to, ~7 KB when it is also polled and
# acknowledged (its lateness histogram, measured): 10,000 such queues cost at most
# ~70 MB, and only writes to that many queues that then hold nothing reach it.
MAX_QUEUES_NOT_HOLDING = 10_000
# Cron entry names with series that the last read of the database did not show
# stored (installed since, or uninstalled and not yet idle): one series each, so
# installing and uninstalling made-up names in one queue costs at most this many.
MAX_CRON_ENTRIES_NOT_STORED = 10_000
# The kinds of hourglass_errors_total, each series made at 0 on start: increase()
# reads nothing in a series whose first sample is already 1, so without them the
# first failure of a kind would never reach an alert (deploy/prometheus/alerts.yml).
ERROR_KINDS = (
    "database_unavailable",
    "cron_pass",
    "cron_entry",
    "history_prune",
    "expiry_sweep",
    "group_keeper",
    "metrics_queue_gauges",
    "metrics_table_health",
    "push_refresh",
    "push_claim",
    "push_settle",
)
# The collectors with a queue label (the first of their labels).
LabelledByQueue = Counter | Histogram


class Metrics:
    """The service's collectors. One instance per app, so tests get fresh counters.

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
        self.multiprocess_dir = multiprocess_dir
        if multiprocess_dir is not None and not getattr(values.ValueClass, "_multiprocess", False):
            # prometheus-client chooses where values go when it is first imported.
            raise RuntimeError(
                "multiprocess metrics need PROMETHEUS_MULTIPROC_DIR set before "
                "prometheus_client is imported"
            )
        if multiprocess_dir is not None:
            # Removing a series forgets it in this process; its last values stay in the
            # files (README, "Several processes"). prometheus-client warns of it each time.
            warnings.filterwarnings(
                "ignore", "(Removal|Clearing) of labels has not been implemented", UserWarning
            )
        self.queues = QueueLabels(
            self.clock, forget_queue=self._remove_series, forget_entry=self._remove_entry_series
        )
        build = _BuildInfo()
        self.registry.register(build)
        self.database_statements = Counter(
            "hourglass_database_statements",
            "Statements sent to the database (what an idle service costs the database, too)",
            registry=self.registry,
        )

        self._cron_runs_installed = Counter(
            "hourglass_cron_runs_installed",
            "Cron runs installed as messages (each run once, whichever replica installs it)",
            ["queue", "name"],
            registry=self.registry,
        )
        self.errors = Counter(
            "hourglass_errors",
            "Failures by kind: database_unavailable (a request answered 503), cron_pass, "
            "cron_entry, history_prune, expiry_sweep, group_keeper, metrics_queue_gauges, "
            "metrics_table_health, "
            "push_refresh, push_claim, push_settle",
            ["kind"],
            registry=self.registry,
        )
        for kind in ERROR_KINDS:
            self.errors.labels(kind=kind)

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
        self._released = Counter(
            "hourglass_messages_released",
            "Messages given back without acknowledgement (whole locks and per key)",
            ["queue"],
            registry=self.registry,
        )
        self._dead_lettered = Counter(
            "hourglass_messages_dead_lettered",
            "Messages moved to their dead-letter queue after their last allowed delivery",
            ["queue"],
            registry=self.registry,
        )
        self._expired = Counter(
            "hourglass_messages_expired",
            "Messages whose expiry passed: moved to their dead-letter queue, or removed",
            ["queue"],
            registry=self.registry,
        )
        self._polls = Counter(
            "hourglass_polls",
            f"Polls answered, with messages or empty (queue {OTHER_QUEUES!r}: empty polls of "
            "queues that hold nothing)",
            ["queue", "result"],
            registry=self.registry,
        )
        self._held_back = Counter(
            "hourglass_polls_held_back",
            "Polls (and push claims) that took less than they asked for, possibly nothing, "
            "because a queue limit left no more room: max_leased or rate (counted once per "
            "poll, however long it waited)",
            ["queue", "limit"],
            registry=self.registry,
        )
        self._lateness = Histogram(
            "hourglass_delivery_lateness_seconds",
            "First delivery minus the time it was due",
            ["queue"],
            buckets=LATENESS_BUCKETS,
            registry=self.registry,
        )
        self._push_requests = Counter(
            "hourglass_push_requests",
            "Push requests by result: the answer's status class (2xx, 3xx, 4xx, 5xx), "
            "timeout, or error (no answer: connection refused or reset, and the like)",
            ["queue", "result"],
            registry=self.registry,
        )
        self._push_duration = Histogram(
            "hourglass_push_duration_seconds",
            "Push requests, from their start to their answer or failure",
            ["queue"],
            buckets=PUSH_DURATION_BUCKETS,
            registry=self.registry,
        )
        self._queue_gauges = _QueueGauges()
        self.registry.register(self._queue_gauges)
        self.table_health = TableHealthGauges(lambda: self.error("metrics_table_health"))
        self.registry.register(self.table_health)
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
            "hourglass_connections_open",
            "Client connections open",
            registry=self.registry,
            # Several processes: each writes its own count, the dead ones' go (mark_process_dead).
            multiprocess_mode="livesum",
        )
        self._listener_connected = Gauge(
            "hourglass_listener_connected",
            "1 while this process listens for other processes' notifications (PostgreSQL: "
            "LISTEN); 0 while its long polls rely on re-checks alone (with several "
            "processes: 0 if any of them does not listen)",
            registry=self.registry,
            multiprocess_mode="livemin",
        )
        self._listener_reconnects = Counter(
            "hourglass_listener_reconnects",
            "Times the listener connected again after losing its connection",
            registry=self.registry,
        )
        self._peers_told = Counter(
            "hourglass_peer_notifications",
            "Queue names sent to the other processes (several offers to one queue while a "
            "notification is on its way go out as one)",
            registry=self.registry,
        )
        self._open_connections: Callable[[], int] | None = None
        self._exposed = self.registry
        if multiprocess_dir is not None:
            # What a scrape shows: every process's files, then what this one reads itself.
            self._exposed = CollectorRegistry()
            self._exposed.register(build)
            MultiProcessCollector(self._exposed, multiprocess_dir)
            self._exposed.register(self._queue_gauges)
            self._exposed.register(self.table_health)
        # Queue label -> the series made for it, by collector and the values of its
        # other labels: what forgetting the queue removes, and only that (up to
        # prometheus-client 0.21.1, removing a label set never made raises KeyError).
        self._queue_series: dict[str, dict[tuple[LabelledByQueue, tuple[str, ...]], Any]] = {}
        self._queues_read_at: int | None = None

    # -- what the queue service reports (QueueEvents) ---------------------------------

    def offered(self, queue: str, outcomes: Sequence[Outcome]) -> None:
        label = self.queues.label_for_write(queue)
        for outcome, count in Tally(outcomes).items():
            self._series(self._offered, label, outcome.value).inc(count)

    def polled(self, queue: str, lease: Lease | None, now: int) -> None:
        if lease is None:
            self._series(self._polls, self.queues.label_for_empty_poll(queue), "empty").inc()
            return
        label = self.queues.label_for_write(queue)
        self._series(self._polls, label, "messages").inc()
        lateness = self._series(self._lateness, label)
        firsts = 0
        for delivery in lease.deliveries:  # one pass: polls of 100 are the hot path
            if not delivery.redelivery:
                firsts += 1
                lateness.observe(max(0, now - delivery.message.scheduled_at_initially) / 1000)
        redeliveries = len(lease.deliveries) - firsts
        if firsts:
            self._series(self._delivered, label, "first").inc(firsts)
        if redeliveries:
            self._series(self._delivered, label, "redelivery").inc(redeliveries)

    def acknowledged(self, queue: str, count: int) -> None:
        self._series(self._acknowledged, self.queues.label_for_write(queue)).inc(count)

    def released(self, queue: str, count: int) -> None:
        self._series(self._released, self.queues.label_for_write(queue)).inc(count)

    def dead_lettered(self, queue: str, count: int) -> None:
        self._series(self._dead_lettered, self.queues.label_for_write(queue)).inc(count)

    def expired(self, queue: str, count: int) -> None:
        self._series(self._expired, self.queues.label_for_write(queue)).inc(count)

    def held_back(self, queue: str, limit: Limit) -> None:
        # Only a queue with settings of its own has a limit: it has series of its own.
        self._series(self._held_back, self.queues.label_for_write(queue), limit.value).inc()

    # -- what the push dispatcher reports (PushEvents) ------------------------------------

    def pushed(self, queue: str, result: str, seconds: float) -> None:
        label = self.queues.label_for_write(queue)
        self._series(self._push_requests, label, str(result)).inc()
        self._series(self._push_duration, label).observe(seconds)

    def cron_runs_installed(self, queue: str, name: str, count: int) -> None:
        queue_label, name_label = self.queues.labels_for_cron_runs(queue, name)
        self._series(self._cron_runs_installed, queue_label, name_label).inc(count)

    def _series(self, metric: LabelledByQueue, queue: str, *other_labels: str) -> Any:
        """The series of `metric` for `queue` and `other_labels`, made on first use.

        Called right after QueueLabels stamped the queue's event, so no scrape forgets
        the queue meanwhile (it would have to stand idle IDLE_QUEUE_SECONDS first).
        """
        made = self._queue_series.get(queue)
        if made is None:
            made = self._queue_series.setdefault(queue, {})
        child = made.get((metric, other_labels))
        if child is None:
            child = made[metric, other_labels] = metric.labels(queue, *other_labels)
        return child

    # -- scrape-time gauges -----------------------------------------------------------

    async def refresh_queues(
        self,
        read_stats: Callable[[], Awaitable[list[QueueStats]]],
        read_configured: Callable[[], Awaitable[list[str]]],
        read_cron_entries: Callable[[], Awaitable[list[tuple[str, str]]]],
        read_ready: Callable[[], Awaitable[bool]] | None = None,
        read_table_health: Callable[[], Awaitable[TableHealth]] | None = None,
    ) -> None:
        """Read which queues hold what, unless that was read moments ago: set the queue
        gauges, and remove the series of queues that hold nothing and of cron entry
        names no longer stored (`read_cron_entries`: (queue, name) of every stored
        entry), once idle. With `read_ready` (whether the database answers at this
        release's schema), set the readiness gauge first; with `read_table_health`, set
        the tables' health gauges last (app/table_health.py).

        A scrape storm costs the database five reads per QUEUE_GAUGES_SECONDS; while
        the database is down the queue gauges keep their last values and the
        readiness gauge reads 0.
        """
        now = self.clock.now_ms()
        if self._queues_read_at is not None and 0 <= now - self._queues_read_at < (
            QUEUE_GAUGES_SECONDS * 1000
        ):
            return
        self._queues_read_at = now
        try:
            if read_ready is not None:
                ready = False
                try:
                    ready = await read_ready()
                finally:  # set once answered: a scrape meanwhile reads the last answer
                    self._queue_gauges.ready = 1 if ready else 0
            queues = await read_stats()
            configured = await read_configured()
            cron_entries = await read_cron_entries()
        except StorageUnavailable:
            self.error("metrics_queue_gauges")
            return
        self._queue_gauges.stats, self._queue_gauges.read_at = queues, now
        self.queues.refresh({stats.queue for stats in queues}.union(configured), set(cron_entries))
        if read_table_health is not None:
            await self.table_health.refresh(read_table_health, now)

    def _remove_series(self, queue: str) -> None:
        """Remove every series made for `queue`."""
        for metric, other_labels in self._queue_series.pop(queue, {}):
            metric.remove(queue, *other_labels)

    def _remove_entry_series(self, queue: str, name: str) -> None:
        """Remove the series made for the cron entry `name` of `queue`, if any."""
        made = self._queue_series.get(queue, {})
        if made.pop((self._cron_runs_installed, (name,)), None) is not None:
            self._cron_runs_installed.remove(queue, name)

    def error(self, kind: str) -> None:
        self.errors.labels(kind=kind).inc()

    # -- what the server reports (app.server.ConnectionEvents) --------------------------

    def connection_dropped(self, reason: str) -> None:
        self._connections_dropped.labels(reason=reason).inc()

    def watch_connections(self, open_connections: Callable[[], int]) -> None:
        if self.multiprocess_dir is None:
            self._connections_open.set_function(open_connections)
        else:
            # A function's value is not written to the files: the worker's server
            # writes the count on its tick (sample_connections).
            self._open_connections = open_connections

    def sample_connections(self) -> None:
        """Write this process's count of open connections for the other processes' scrapes."""
        if self._open_connections is not None:
            self._connections_open.set(self._open_connections())

    # -- what the link to other processes reports (storage's PeerEvents) ---------------

    def listener_connected(self, connected: bool) -> None:
        self._listener_connected.set(1 if connected else 0)

    def listener_reconnected(self) -> None:
        self._listener_reconnects.inc()

    def peers_told(self, names: int) -> None:
        self._peers_told.inc(names)

    def statement_sent(self, _statement: str = "") -> None:
        """One more statement sent to the database (the store calls it after each, with
        its text)."""
        self.database_statements.inc()

    def exposition(self) -> bytes:
        """Every collector's samples in the Prometheus text format (with several processes,
        added up across them)."""
        return generate_latest(self._exposed)


class _BuildInfo:
    """hourglass_build_info: the running release (an Info metric, which prometheus-client's
    multiprocess mode does not write to its files, so a collector of its own)."""

    def collect(self) -> Iterator[Metric]:
        yield InfoMetricFamily("hourglass_build", "The running release", {"version": __version__})


class _QueueGauges:
    """The queue gauges as the last read of the database found them, in the scraping
    process only: every process reads the same database, so adding their gauges up
    would show N times the depth."""

    def __init__(self) -> None:
        self.stats: list[QueueStats] = []
        self.read_at = 0  # epoch ms of the read
        # Without it a replica whose database does not answer, or answers at another
        # schema, still answers /metrics (`up` stays 1) with its gauges frozen at their
        # last values: nothing a scraper reads would say /readyz answers 503.
        self.ready = 0

    def collect(self) -> Iterator[Metric]:
        stats, now = self.stats, self.read_at
        messages = GaugeMetricFamily(
            "hourglass_queue_messages",
            "Messages in the queue by state (read at scrape time)",
            labels=["queue", "state"],
        )
        oldest = GaugeMetricFamily(
            "hourglass_queue_oldest_ready_age_seconds",
            "How long the oldest ready message has waited (0 when none is ready)",
            labels=["queue"],
        )
        for queue in stats:
            for state in ("ready", "scheduled", "leased"):
                messages.add_metric([queue.queue, state], getattr(queue, state))
        paused = GaugeMetricFamily(
            "hourglass_queue_paused",
            "1 while the queue is paused (it delivers nothing), else 0 (read at scrape time)",
            labels=["queue"],
        )
        for queue in stats:
            waited = 0 if queue.oldest_ready_at is None else max(0, now - queue.oldest_ready_at)
            oldest.add_metric([queue.queue], waited / 1000)
            paused.add_metric([queue.queue], 1 if queue.paused else 0)
        yield messages
        yield oldest
        yield paused
        yield GaugeMetricFamily(
            "hourglass_ready",
            "1 when the database answers at this release's schema, as /readyz checks it; "
            "0 when not (read at scrape time)",
            value=self.ready,
        )


class QueueLabels:
    """Which queues and cron entry names have series of their own, and when each last
    had an event.

    Events come from the event loop and, for cron runs on SQLite and MariaDB, from
    storage threads: one lock keeps the tables whole while a scrape walks them.
    """

    def __init__(
        self,
        clock: Clock,
        forget_queue: Callable[[str], object],
        forget_entry: Callable[[str, str], object],
    ) -> None:
        self.clock = clock
        self._forget_queue = forget_queue  # removes a queue's series
        self._forget_entry = forget_entry  # removes one entry name's series
        self._lock = threading.Lock()
        self._last_event: dict[str, int] = {}  # queue -> epoch ms
        # queue -> cron entry names with series -> epoch ms of their last runs installed;
        # every queue here is in _last_event.
        self._entries: dict[str, dict[str, int]] = {}
        # What the last read of the database showed holding something; every one of
        # them is in _last_event, so the others number len(_last_event) - len(_holding).
        self._holding: frozenset[str] = frozenset()
        # The (queue, name) of every cron entry the last read showed stored, and how
        # many names in _entries are not among them.
        self._stored_entries: frozenset[tuple[str, str]] = frozenset()
        self._entries_not_stored = 0

    def label_for_write(self, queue: str) -> str:
        """The label for an event that shows `queue` holds, or held, something."""
        with self._lock:
            return self._label_for_write(queue)

    def _label_for_write(self, queue: str) -> str:
        if (
            queue not in self._last_event
            and len(self._last_event) - len(self._holding) >= MAX_QUEUES_NOT_HOLDING
        ):
            return OTHER_QUEUES
        self._last_event[queue] = self.clock.now_ms()
        return queue

    def labels_for_cron_runs(self, queue: str, name: str) -> tuple[str, str]:
        """The queue and name labels for runs installed for the cron entry `name`."""
        with self._lock:
            queue_label = self._label_for_write(queue)
            if queue_label == OTHER_QUEUES:
                return OTHER_QUEUES, OTHER_QUEUES
            names = self._entries.setdefault(queue, {})
            if name not in names and (queue, name) not in self._stored_entries:
                if self._entries_not_stored >= MAX_CRON_ENTRIES_NOT_STORED:
                    # The queue's overflow name: one more at most, gone once idle as any.
                    name = OTHER_QUEUES
                if name not in names:
                    self._entries_not_stored += 1
            names[name] = self.clock.now_ms()
            return queue, name

    def label_for_empty_poll(self, queue: str) -> str:
        """The label for an empty poll: the queue's own only if it has series already."""
        with self._lock:
            if queue not in self._last_event:
                return OTHER_QUEUES
            self._last_event[queue] = self.clock.now_ms()
            return queue

    def refresh(self, holding: set[str], stored_entries: set[tuple[str, str]]) -> None:
        """Take the queues the database shows holding something and the (queue, name) of
        the cron entries it stores; forget the queues that hold nothing and the entry
        names no longer stored that had no event for IDLE_QUEUE_SECONDS (their series go)."""
        with self._lock:
            now = self.clock.now_ms()

            def idle(last_event: int) -> bool:
                return now - last_event >= IDLE_QUEUE_SECONDS * 1000

            for queue in holding:
                self._last_event.setdefault(queue, now)
            self._holding = frozenset(holding)
            self._stored_entries = frozenset(stored_entries)
            for queue in [
                queue
                for queue, last_event in self._last_event.items()
                if queue not in holding and idle(last_event)
            ]:
                del self._last_event[queue]
                # Within the lock: an event that labels the queue again comes after.
                self._entries.pop(queue, None)
                self._forget_queue(queue)
            not_stored = 0
            for queue, names in list(self._entries.items()):
                for name, last_event in list(names.items()):
                    if (queue, name) in stored_entries:
                        continue
                    if idle(last_event):
                        del names[name]
                        self._forget_entry(queue, name)
                    else:
                        not_stored += 1
                if not names:
                    del self._entries[queue]
            self._entries_not_stored = not_stored
