"""The gauges read at scrape time: the queues' depths, readiness and the tables' health, read
from the database at most every QUEUE_GAUGES_SECONDS by the process that answers the scrape,
and the running release."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric

from app import __version__
from app.clock import Clock
from app.domain.errors import StorageUnavailable
from app.domain.messages import QueueStats
from app.domain.table_health import TableHealth
from app.metrics.labels import QueueLabels
from app.metrics.table_health import TableHealthGauges

# Queue gauges come from the database at scrape time, at most this often.
QUEUE_GAUGES_SECONDS = 5.0


class BuildInfo:
    """hourglass_build_info: the running release (an Info metric, which prometheus-client's
    multiprocess mode does not write to its files, so a collector of its own)."""

    def collect(self) -> Iterator[Metric]:
        yield InfoMetricFamily("hourglass_build", "The running release", {"version": __version__})


class QueueGauges:
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


class ScrapeGauges:
    """The queue gauges and the tables' health gauges (two collectors), and their reads;
    a read tells `labels` which queues and cron entry names the database holds.
    `error(kind)` counts a read that failed."""

    def __init__(self, clock: Clock, labels: QueueLabels, error: Callable[[str], None]) -> None:
        self.clock = clock
        self.labels = labels
        self.error = error
        self.queues = QueueGauges()
        self.table_health = TableHealthGauges(lambda: error("metrics_table_health"))
        self._read_at: int | None = None

    async def refresh(
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
        the tables' health gauges last (app/metrics/table_health.py).

        A scrape storm costs the database five reads per QUEUE_GAUGES_SECONDS; while
        the database is down the queue gauges keep their last values and the
        readiness gauge reads 0.
        """
        now = self.clock.now_ms()
        if self._read_at is not None and 0 <= now - self._read_at < (QUEUE_GAUGES_SECONDS * 1000):
            return
        self._read_at = now
        try:
            if read_ready is not None:
                ready = False
                try:
                    ready = await read_ready()
                finally:  # set once answered: a scrape meanwhile reads the last answer
                    self.queues.ready = 1 if ready else 0
            queues = await read_stats()
            configured = await read_configured()
            cron_entries = await read_cron_entries()
        except StorageUnavailable:
            self.error("metrics_queue_gauges")
            return
        self.queues.stats, self.queues.read_at = queues, now
        self.labels.refresh({stats.queue for stats in queues}.union(configured), set(cron_entries))
        if read_table_health is not None:
            await self.table_health.refresh(read_table_health, now)
