"""The tables' health as each real database tells it (docs/decisions/0024-table-health.md):
a snapshot held open on a connection of its own shows as vacuum (or purge) held back while
messages churn, and the rows it keeps grow; what each database cannot tell, or refuses to
the service's user, is left out without failing the read."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import Settings
from app.domain.messages import Offer
from app.domain.table_health import TableHealth, VacuumHolder
from app.main import create_app
from app.metrics.gauges import QUEUE_GAUGES_SECONDS
from app.storage.blocking import BlockingStorage, create_blocking_storage
from tests.conftest import START_MS, FakeClock, truncate_all
from tests.support.helpers import INNODB_VIEWS_EVERY_SECONDS, wait_until

pytestmark = pytest.mark.server_databases

DATABASES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "databases.md"

# Messages offered, leased and acknowledged while the snapshot is held: each is three
# transactions (offer, poll, acknowledgement) and leaves two dead row versions (the
# poll's update, the acknowledgement's delete).
CHURNED = 40
# How long a test waits for the statistics of another session to arrive.
TIMEOUT = 30


@pytest.fixture
def postgresql_store(postgresql_url: str) -> Iterator[BlockingStorage]:
    truncate_all(postgresql_url)
    _settle(postgresql_url)
    # One connection: the one whose statistics pg_stat_force_next_flush() sends.
    store = create_blocking_storage(
        Settings(database_url=postgresql_url, auto_migrate=False, pool_size=1)
    )
    yield store
    store.close()


@pytest.fixture
def mariadb_store(mariadb_url: str) -> Iterator[BlockingStorage]:
    truncate_all(mariadb_url)
    store = create_blocking_storage(Settings(database_url=mariadb_url, auto_migrate=False))
    yield store
    store.close()


def _churn(store: BlockingStorage, count: int) -> None:
    """Offer, lease and acknowledge `count` messages, one at a time."""
    for index in range(count):
        key = f"churn-{index}"
        store.messages.offer_many("churn", [Offer(key, b"1", START_MS)], START_MS)
        claim = store.leases.poll("churn", 1, f"lock-{index}", START_MS + 60_000, START_MS)
        assert [delivery.message.key for delivery in claim.deliveries] == [key]
        assert store.leases.acknowledge("churn", f"lock-{index}", START_MS) == 1


def _holder(health: TableHealth, kind: str = "transaction") -> VacuumHolder:
    (holder,) = [holder for holder in health.holders if holder.kind == kind]
    return holder


def _dead_rows(health: TableHealth) -> int:
    (table,) = [table for table in health.tables if table.table == "delayed_queue"]
    return table.dead_rows


@contextmanager
def _held_snapshot(url: str) -> Iterator[int]:
    """A connection of its own, in a REPEATABLE READ transaction whose snapshot has read
    the queue, until the block ends; its session's id (PostgreSQL's pid)."""
    engine = create_engine(url, isolation_level="REPEATABLE READ")
    session = "pg_backend_pid()" if url.startswith("postgresql") else "connection_id()"
    try:
        with engine.connect() as holder:
            assert holder.execute(text("SELECT count(*) FROM delayed_queue")).scalar() == 0
            yield holder.execute(text(f"SELECT {session}")).scalar()
            holder.rollback()
    finally:
        engine.dispose()


def _settle(url: str) -> None:
    """Wait for every other session of the database to end, then vacuum the message table.

    A session sends its counts when it goes idle or ends, and its counts include the dead
    rows its reads pruned away (a decrement): an earlier test's session ending during a
    test would take them off the dead rows the test counts. A session gone from
    pg_stat_activity has sent its counts; the vacuum then removes what earlier tests left,
    so nothing is pruned meanwhile, and its count of dead rows replaces theirs.
    """
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    others = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    try:
        with engine.connect() as connection:
            wait_until(
                lambda: connection.execute(others).scalar() == 0,
                TIMEOUT,
                "earlier tests' sessions to end",
            )
            connection.execute(text("VACUUM delayed_queue"))
    finally:
        engine.dispose()


def _page_statements(test: str) -> list[str]:
    """The statements of the SQL block that docs/operations/databases.md says `test` runs
    ("When vacuum is held back"), in the page's order."""
    marker = f"<!-- run by: tests/storage/test_table_health.py::{test} -->\n```sql\n"
    page = DATABASES_PAGE.read_text()
    assert marker in page, f"the databases page lost the query {test} runs"
    block = page.split(marker, 1)[1].split("```", 1)[0]
    return [statement for statement in block.split(";") if statement.strip()]


def test_a_held_snapshot_holds_back_vacuum_and_keeps_dead_rows_on_postgresql(
    postgresql_store, postgresql_url
):
    before = postgresql_store.table_health.read()
    assert [holder.kind for holder in before.holders] == [
        "transaction",
        "prepared_transaction",
        "replication_slot",
        "standby",
    ]
    assert {table.table for table in before.tables} == {"delayed_queue", "delivery_history"}
    with _held_snapshot(postgresql_url) as pid:
        held = _holder(postgresql_store.table_health.read())
        assert held.seconds is not None and held.seconds > 0
        assert held.transactions is not None
        # The page's queries: the first finds it, as an operator would; the others (the
        # prepared transactions, the replication slots) run too.
        sessions, *others = _page_statements(
            "test_a_held_snapshot_holds_back_vacuum_and_keeps_dead_rows_on_postgresql"
        )
        operator = create_engine(postgresql_url)
        try:
            with operator.connect() as connection:
                found = connection.execute(text(sessions)).all()
                for statement in others:
                    connection.execute(text(statement)).all()
        finally:
            operator.dispose()
        assert [row.pid for row in found] == [pid]

        _churn(postgresql_store, CHURNED)
        # The churning session's counts reach the statistics once it is next idle.
        postgresql_store.wait(
            postgresql_store.storage.runner.scalar(text("SELECT pg_stat_force_next_flush()"), {})
        )

        def churn_counted() -> bool:
            return _dead_rows(postgresql_store.table_health.read()) >= (
                _dead_rows(before) + 2 * CHURNED
            )

        wait_until(churn_counted, TIMEOUT, "the churn's dead rows in the statistics")
        during = postgresql_store.table_health.read()
        still = _holder(during)
        assert still.transactions is not None and still.transactions >= (
            held.transactions + 3 * CHURNED
        )
        assert still.seconds is not None and still.seconds > held.seconds
    after = _holder(postgresql_store.table_health.read())
    assert after.transactions is not None and after.transactions < still.transactions


def test_autovacuum_and_the_last_vacuum_are_read_per_table_on_postgresql(
    postgresql_store, postgresql_url
):
    admin = create_engine(postgresql_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            server = all(
                connection.execute(text(f"SHOW {setting}")).scalar() == "on"
                for setting in ("autovacuum", "track_counts")
            )
            health = postgresql_store.table_health.read()
            assert {table.table: table.autovacuum for table in health.tables} == {
                "delayed_queue": server,
                "delivery_history": server,
            }
            connection.execute(text("ALTER TABLE delayed_queue SET (autovacuum_enabled = 0)"))
            try:
                health = postgresql_store.table_health.read()
            finally:
                connection.execute(text("ALTER TABLE delayed_queue RESET (autovacuum_enabled)"))
            assert {table.table: table.autovacuum for table in health.tables} == {
                "delayed_queue": False,
                "delivery_history": server,
            }

            started = connection.execute(text("SELECT extract(epoch FROM now())")).scalar()
            connection.execute(text("VACUUM delivery_history"))

        def vacuumed() -> bool:
            tables = postgresql_store.table_health.read().tables
            (history,) = [table for table in tables if table.table == "delivery_history"]
            return history.last_vacuum_at is not None and history.last_vacuum_at >= started

        wait_until(vacuumed, TIMEOUT, "the vacuum in the statistics")
    finally:
        admin.dispose()


def _gauges(client: TestClient, clock: FakeClock) -> dict[tuple[str, tuple], float]:
    """One scrape's samples, read afresh (the clock moved past the gauges' cache)."""
    clock.advance(QUEUE_GAUGES_SECONDS)
    answer = client.get("/metrics")
    assert answer.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _held_transactions(samples: dict[tuple[str, tuple], float]) -> float:
    return samples["hourglass_vacuum_held_back_transactions", (("kind", "transaction"),)]


def test_metrics_show_a_held_snapshot_while_messages_churn_on_postgresql(postgresql_url):
    truncate_all(postgresql_url)
    clock = FakeClock()
    settings = Settings(database_url=postgresql_url, auto_migrate=False)
    dead = ("hourglass_table_rows", (("state", "dead"), ("table", "delayed_queue")))
    _settle(postgresql_url)
    with TestClient(create_app(settings, clock=clock)) as client:
        before = _gauges(client, clock)
        with _held_snapshot(postgresql_url):
            held = _held_transactions(_gauges(client, clock))
            for index in range(CHURNED):
                offered = client.put(f"/v1/queues/churn/messages/{index}", json={"payload": 1})
                assert offered.status_code == 201
                poll = client.post("/v1/queues/churn/poll", json={}).json()
                assert len(poll["messages"]) == 1
                lock = poll["lock_id"]
                assert client.delete(f"/v1/queues/churn/locks/{lock}").status_code == 204
            # The service's sessions send their counts within a second of going idle.
            wait_until(
                lambda: _gauges(client, clock)[dead] >= before[dead] + 2 * CHURNED,
                TIMEOUT,
                "the churn's dead rows in /metrics",
            )
            during = _gauges(client, clock)
            assert _held_transactions(during) >= held + 3 * CHURNED
            seconds = during["hourglass_vacuum_held_back_seconds", (("kind", "transaction"),)]
            assert seconds > 0


def test_an_open_transaction_holds_back_purge_on_mariadb(mariadb_store, mariadb_url):
    before = mariadb_store.table_health.read()
    assert before.tables == ()
    assert [(holder.kind, holder.transactions) for holder in before.holders] == [
        ("transaction", None)
    ]
    with _held_snapshot(mariadb_url) as thread_id:
        # InnoDB dates a transaction to the second: it shows once one has begun since.
        # Its view of the transactions is a copy made again only when nobody has read
        # it for 0.1 s: asked more often, it would never change.
        wait_until(
            lambda: (_holder(mariadb_store.table_health.read()).seconds or 0) > 0,
            TIMEOUT,
            "the open transaction to show",
            every=INNODB_VIEWS_EVERY_SECONDS,
        )
        # The page's query finds it, as an operator would (the server's other
        # transactions, of other tests' databases, may show beside it; and the oldest
        # one the gauge saw above may be one of theirs, so ours may show a moment later).
        (transactions,) = _page_statements("test_an_open_transaction_holds_back_purge_on_mariadb")
        operator = create_engine(mariadb_url)

        def found_by_the_page() -> bool:
            with operator.connect() as connection:
                found = connection.execute(text(transactions)).all()
            return thread_id in [row.trx_mysql_thread_id for row in found]

        try:
            wait_until(
                found_by_the_page,
                TIMEOUT,
                "the page's query to show the open transaction",
                every=INNODB_VIEWS_EVERY_SECONDS,
            )
        finally:
            operator.dispose()
        _churn(mariadb_store, CHURNED)

        # The read view keeps the undo log of every transaction committed after it (the
        # poll's, the acknowledgement's, at least) from purge, and stays the oldest open
        # transaction; InnoDB's copy of its transactions may lag while other tests' services
        # read it (a copy is made again only after 0.1 s unread), so the gauge is read again
        # until it shows what still stands.
        def holding_back() -> bool:
            during = mariadb_store.table_health.read()
            held = during.undo_history is not None and during.undo_history >= 2 * CHURNED
            return held and (_holder(during).seconds or 0) > 0

        wait_until(
            holding_back,
            TIMEOUT,
            "the open transaction to hold back purge",
            details=mariadb_store.table_health.read,
            every=INNODB_VIEWS_EVERY_SECONDS,
        )


@pytest.fixture
def mariadb_user_without_process(mariadb_url: str) -> Iterator[str]:
    """The run's MariaDB database, through a user of its own with every privilege on it
    and none on the server (no PROCESS)."""
    url = make_url(mariadb_url)
    user, password = f"hg_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE USER '{user}'@'%' IDENTIFIED BY '{password}'"))
            connection.execute(text(f"GRANT ALL ON `{url.database}`.* TO '{user}'@'%'"))
        try:
            yield url.set(username=user, password=password).render_as_string(hide_password=False)
        finally:
            with admin.connect() as connection:
                connection.execute(text(f"DROP USER '{user}'@'%'"))
    finally:
        admin.dispose()


def test_what_mariadb_refuses_to_the_services_user_is_left_out(
    mariadb_user_without_process, caplog
):
    store = create_blocking_storage(
        Settings(database_url=mariadb_user_without_process, auto_migrate=False)
    )
    try:
        with caplog.at_level(logging.WARNING, logger="app.storage.table_health"):
            assert store.table_health.read() == TableHealth()
            assert store.table_health.read() == TableHealth()  # said once, tried each time
        said = [record.getMessage() for record in caplog.records]
        assert len(said) == 2, said  # one line for each reading refused
        assert all("PROCESS" in line for line in said), said
    finally:
        store.close()


def test_sqlite_tells_nothing_and_metrics_answer(sqlite_url):
    store = create_blocking_storage(Settings(database_url=sqlite_url, auto_migrate=False))
    try:
        assert store.table_health.read() == TableHealth()
    finally:
        store.close()
    with TestClient(create_app(Settings(database_url=sqlite_url, auto_migrate=False))) as client:
        answer = client.get("/metrics")
    assert answer.status_code == 200
    assert "hourglass_vacuum_held_back" not in answer.text
