"""The tables' health gauges of /metrics: dead and live rows, what holds back vacuum (or
InnoDB's purge) and for how long, when vacuum last ran, whether autovacuum may run.

Read from the database at scrape time with the queue gauges (app/metrics/gauges.py: at
most every QUEUE_GAUGES_SECONDS, however often a scrape comes, by the process that answers
it), and shown by that process alone, like the queue gauges: every process reads the same
database. A family shows only what the database tells (docs/decisions/0024-table-health.md):
on PostgreSQL all but hourglass_innodb_history_length, on MariaDB the transactions holding
back purge and its lag, on SQLite none. While the database does not answer, the gauges
keep their last values; a reading the database refuses to the service's user has no series.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator

from prometheus_client.core import GaugeMetricFamily, Metric

from app.domain.errors import StorageUnavailable
from app.domain.table_health import TableHealth

log = logging.getLogger(__name__)

# Every family this collector may show, by the name a scrape shows it under.
FAMILIES = (
    "hourglass_table_rows",
    "hourglass_table_last_vacuum_timestamp_seconds",
    "hourglass_table_autovacuum_enabled",
    "hourglass_vacuum_held_back_seconds",
    "hourglass_vacuum_held_back_transactions",
    "hourglass_innodb_history_length",
)


class TableHealthGauges:
    """The last read of the tables' health, as a collector. `failed()` is called for each
    read the database did not answer."""

    def __init__(self, failed: Callable[[], object]) -> None:
        self._failed = failed
        self._said_why = False  # whether a read's unexpected failure has been logged
        self._health = TableHealth()
        # How long each kind of holder has held vacuum back, in seconds, as of the last read.
        self._held_seconds: dict[str, float] = {}
        # Kind -> (the horizon it holds at, epoch ms of the first read that saw it there),
        # for the kinds the database keeps no start time for (replication slots, standbys).
        self._held_since: dict[str, tuple[int, int]] = {}

    async def refresh(self, read: Callable[[], Awaitable[TableHealth]], now: int) -> None:
        """Read the tables' health at `now` (epoch ms); when the read fails, keep the last."""
        try:
            health = await read()
        except StorageUnavailable:
            self._failed()
            return
        except Exception:
            # Catalog views are the server's, not the service's: one this server has not,
            # or answers otherwise, must not take /metrics down with it.
            self._failed()
            if not self._said_why:
                self._said_why = True
                log.exception("the tables' health could not be read; its gauges stand still")
            return
        held: dict[str, float] = {}
        for holder in health.holders:
            if holder.seconds is not None:
                held[holder.kind] = holder.seconds
            elif holder.horizon is None:  # nothing of that kind holds
                self._held_since.pop(holder.kind, None)
                held[holder.kind] = 0.0
            else:
                # Held since the first read that saw this horizon: at least that long.
                since = self._held_since.get(holder.kind)
                if since is None or since[0] != holder.horizon:
                    since = self._held_since[holder.kind] = (holder.horizon, now)
                held[holder.kind] = max(0, now - since[1]) / 1000
        self._health, self._held_seconds = health, held

    def collect(self) -> Iterator[Metric]:
        health, held = self._health, self._held_seconds
        rows = GaugeMetricFamily(
            "hourglass_table_rows",
            "Rows of the service's tables by state, as PostgreSQL's statistics count them: "
            "live, or dead (deleted or updated row versions vacuum has not removed yet; "
            "they grow while vacuum is held back). Read at scrape time",
            labels=["table", "state"],
        )
        vacuumed = GaugeMetricFamily(
            "hourglass_table_last_vacuum_timestamp_seconds",
            "When a vacuum of the table, manual or automatic, last ended (unix seconds; 0: "
            "none since the statistics were reset)",
            labels=["table"],
        )
        autovacuum = GaugeMetricFamily(
            "hourglass_table_autovacuum_enabled",
            "1 when autovacuum may vacuum the table (the server's autovacuum and "
            "track_counts on, the table's autovacuum_enabled not off); 0 when its dead rows "
            "wait for a manual VACUUM",
            labels=["table"],
        )
        for table in health.tables:
            rows.add_metric([table.table, "live"], table.live_rows)
            rows.add_metric([table.table, "dead"], table.dead_rows)
            vacuumed.add_metric([table.table], table.last_vacuum_at or 0)
            autovacuum.add_metric([table.table], 1 if table.autovacuum else 0)
        held_seconds = GaugeMetricFamily(
            "hourglass_vacuum_held_back_seconds",
            "How long the oldest holder of each kind has kept vacuum (MariaDB: purge) from "
            "removing rows deleted since: a transaction or a prepared transaction since it "
            "began; a replication slot or a standby since this process first saw it there. "
            "0 when none holds",
            labels=["kind"],
        )
        held_transactions = GaugeMetricFamily(
            "hourglass_vacuum_held_back_transactions",
            "How many transactions old the oldest holder of each kind is (PostgreSQL's "
            "age()): rows deleted by any later transaction stay until it ends or moves. "
            "0 when none holds",
            labels=["kind"],
        )
        for holder in health.holders:
            held_seconds.add_metric([holder.kind], held.get(holder.kind, 0.0))
            if holder.transactions is not None:
                held_transactions.add_metric([holder.kind], holder.transactions)
        families = [rows, vacuumed, autovacuum, held_seconds, held_transactions]
        if health.undo_history is not None:
            families.append(
                GaugeMetricFamily(
                    "hourglass_innodb_history_length",
                    "MariaDB: committed transactions whose undo log InnoDB's purge has not "
                    "removed yet (its history list, one per transaction that wrote); it grows "
                    "while an old transaction keeps its read view",
                    value=health.undo_history,
                )
            )
        for family in families:
            if family.samples:  # a family the database tells nothing of is left out
                yield family
