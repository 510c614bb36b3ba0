"""The tables' health in /metrics (app/metrics/table_health.py): what each database's reading shows,
how long a holder without a start time has held, and that a read that fails or a scrape
storm neither breaks /metrics nor multiplies the reads."""

from __future__ import annotations

import asyncio

from prometheus_client.parser import text_string_to_metric_families

from app.domain.errors import StorageUnavailable
from app.domain.table_health import TableHealth, TableVacuum, VacuumHolder
from app.metrics import Metrics
from app.metrics.gauges import QUEUE_GAUGES_SECONDS
from app.metrics.table_health import FAMILIES
from tests.conftest import FakeClock

# As PostgreSQL tells it: a forgotten BEGIN 4 minutes old, a slot 90 transactions behind.
POSTGRESQL = TableHealth(
    tables=(
        TableVacuum("delayed_queue", 120, 25_000, 1_795_683_000.5, True),
        TableVacuum("delivery_history", 3_000, 0, None, False),
    ),
    holders=(
        VacuumHolder("transaction", 240.0, 1_500),
        VacuumHolder("prepared_transaction", 0.0, 0),
        VacuumHolder("replication_slot", None, 90, horizon=7_000),
        VacuumHolder("standby", None, 0),
    ),
)
# As MariaDB tells it: the oldest transaction's age, and purge's lag.
MARIADB = TableHealth(holders=(VacuumHolder("transaction", 61.0),), undo_history=4_242)


def _samples(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
        if family.name in FAMILIES
    }


async def _nothing() -> list:
    return []


def _refresh(metrics: Metrics, health: TableHealth) -> None:
    async def read() -> TableHealth:
        return health

    asyncio.run(metrics.refresh_queues(_nothing, _nothing, _nothing, read_table_health=read))


def test_postgresql_shows_rows_holders_vacuums_and_autovacuum():
    metrics = Metrics(clock=FakeClock())
    _refresh(metrics, POSTGRESQL)
    assert _samples(metrics) == {
        ("hourglass_table_rows", (("state", "live"), ("table", "delayed_queue"))): 120,
        ("hourglass_table_rows", (("state", "dead"), ("table", "delayed_queue"))): 25_000,
        ("hourglass_table_rows", (("state", "live"), ("table", "delivery_history"))): 3_000,
        ("hourglass_table_rows", (("state", "dead"), ("table", "delivery_history"))): 0,
        (
            "hourglass_table_last_vacuum_timestamp_seconds",
            (("table", "delayed_queue"),),
        ): 1_795_683_000.5,
        ("hourglass_table_last_vacuum_timestamp_seconds", (("table", "delivery_history"),)): 0,
        ("hourglass_table_autovacuum_enabled", (("table", "delayed_queue"),)): 1,
        ("hourglass_table_autovacuum_enabled", (("table", "delivery_history"),)): 0,
        ("hourglass_vacuum_held_back_seconds", (("kind", "transaction"),)): 240,
        ("hourglass_vacuum_held_back_seconds", (("kind", "prepared_transaction"),)): 0,
        ("hourglass_vacuum_held_back_seconds", (("kind", "replication_slot"),)): 0,
        ("hourglass_vacuum_held_back_seconds", (("kind", "standby"),)): 0,
        ("hourglass_vacuum_held_back_transactions", (("kind", "transaction"),)): 1_500,
        ("hourglass_vacuum_held_back_transactions", (("kind", "prepared_transaction"),)): 0,
        ("hourglass_vacuum_held_back_transactions", (("kind", "replication_slot"),)): 90,
        ("hourglass_vacuum_held_back_transactions", (("kind", "standby"),)): 0,
    }


def test_mariadb_shows_its_oldest_transaction_and_purge_lag_and_sqlite_nothing():
    metrics = Metrics(clock=FakeClock())
    _refresh(metrics, MARIADB)
    assert _samples(metrics) == {
        ("hourglass_vacuum_held_back_seconds", (("kind", "transaction"),)): 61,
        ("hourglass_innodb_history_length", ()): 4_242,
    }
    sqlite = Metrics(clock=FakeClock())
    _refresh(sqlite, TableHealth())
    assert _samples(sqlite) == {}
    # Nothing before the first read either: no family without samples.
    assert _samples(Metrics(clock=FakeClock())) == {}


def _slot(horizon: int | None) -> TableHealth:
    return TableHealth(holders=(VacuumHolder("replication_slot", None, 5, horizon=horizon),))


def _held(metrics: Metrics, kind: str) -> float:
    return _samples(metrics)[("hourglass_vacuum_held_back_seconds", (("kind", kind),))]


def test_a_slot_holds_from_the_first_read_that_saw_its_horizon_until_it_moves():
    # PostgreSQL keeps no time for a slot's xmin: it has held at least since this process
    # first read it there, and a moved horizon starts again.
    clock = FakeClock()
    metrics = Metrics(clock=clock)
    _refresh(metrics, _slot(7_000))
    assert _held(metrics, "replication_slot") == 0
    clock.advance(QUEUE_GAUGES_SECONDS)
    _refresh(metrics, _slot(7_000))
    clock.advance(600)
    _refresh(metrics, _slot(7_000))
    assert _held(metrics, "replication_slot") == 600 + QUEUE_GAUGES_SECONDS
    clock.advance(QUEUE_GAUGES_SECONDS)
    _refresh(metrics, _slot(7_300))  # the standby's oldest query ended
    assert _held(metrics, "replication_slot") == 0
    clock.advance(QUEUE_GAUGES_SECONDS)
    _refresh(metrics, _slot(None))  # nothing holds
    clock.advance(QUEUE_GAUGES_SECONDS)
    _refresh(metrics, _slot(7_300))  # held again: from now, not from before
    assert _held(metrics, "replication_slot") == 0


def _errors(metrics: Metrics, kind: str) -> float:
    (value,) = [
        sample.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for sample in family.samples
        if sample.name == "hourglass_errors_total" and sample.labels["kind"] == kind
    ]
    return value


def test_a_read_that_fails_keeps_the_last_values_and_is_counted():
    clock = FakeClock()
    metrics = Metrics(clock=clock)
    assert _errors(metrics, "metrics_table_health") == 0
    _refresh(metrics, POSTGRESQL)
    shown = _samples(metrics)

    async def gone() -> TableHealth:
        raise StorageUnavailable("the database is busy: a lock or statement bound was reached")

    clock.advance(QUEUE_GAUGES_SECONDS)
    asyncio.run(metrics.refresh_queues(_nothing, _nothing, _nothing, read_table_health=gone))
    assert _samples(metrics) == shown
    assert _errors(metrics, "metrics_table_health") == 1

    async def otherwise() -> TableHealth:
        # A server whose catalog views are not those the statements read.
        raise RuntimeError('column "backend_xmin" does not exist')

    clock.advance(QUEUE_GAUGES_SECONDS)
    asyncio.run(metrics.refresh_queues(_nothing, _nothing, _nothing, read_table_health=otherwise))
    assert _samples(metrics) == shown
    assert _errors(metrics, "metrics_table_health") == 2


def test_a_scrape_storm_reads_the_tables_health_once():
    clock = FakeClock()
    metrics = Metrics(clock=clock)
    reads = 0

    async def scenario() -> None:
        reading, answer = asyncio.Event(), asyncio.Event()

        async def slow() -> TableHealth:
            nonlocal reads
            reads += 1
            reading.set()
            await answer.wait()
            return POSTGRESQL

        def scrape() -> asyncio.Task[None]:
            return asyncio.create_task(
                metrics.refresh_queues(_nothing, _nothing, _nothing, read_table_health=slow)
            )

        first = scrape()
        await asyncio.wait_for(reading.wait(), 5)
        # Scrapes meanwhile, and within QUEUE_GAUGES_SECONDS after, read nothing and show
        # what was there: nothing yet, then the first read's values.
        await asyncio.wait_for(asyncio.gather(*(scrape() for _ in range(50))), 5)
        assert _samples(metrics) == {}
        answer.set()
        await asyncio.wait_for(first, 5)
        clock.advance(QUEUE_GAUGES_SECONDS - 0.001)
        await asyncio.wait_for(scrape(), 5)
        assert reads == 1
        clock.advance(0.001)
        await asyncio.wait_for(scrape(), 5)
        assert reads == 2

    asyncio.run(scenario())
    assert _held(metrics, "transaction") == 240
