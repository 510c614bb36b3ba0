"""The schema Alembic builds is the one the code describes, on every database."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import column, create_engine, insert, inspect, table, text

from app.config import Settings
from app.main import create_app
from app.storage.schema import alembic_config
from tests.conftest import SERVERS, FakeClock, scratch_database
from tests.support.helpers import put


@pytest.fixture
def empty_database_url(database, tmp_path):
    """A new, unmigrated database of the same kind as `database`."""
    if database.name == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
        return
    with scratch_database(database.name, "migrations") as url:
        yield url


def test_alembic_check_finds_no_drift(database):
    command.check(alembic_config(database.url))  # raises on any difference


def test_the_message_table_has_the_seed_columns_and_indexes(database):
    engine = create_engine(database.url)
    try:
        inspector = inspect(engine)
        columns = {column["name"] for column in inspector.get_columns("delayed_queue")}
        indexes = {
            (tuple(index["column_names"]), bool(index["unique"]))
            for index in inspector.get_indexes("delayed_queue")
        }
    finally:
        engine.dispose()
    seed = {
        "id",
        "pKey",
        "pKind",
        "payload",
        "scheduledAt",
        "scheduledAtInitially",
        "createdAt",
        "lockUuid",
    }
    added_by_revisions = {
        "deliveries",
        "firstDeliveredAt",
        "lastDeliveredAt",
        "deadLetteredFrom",
        "priority",  # revision 0009
        "messageGroup",  # revision 0012
        "expiresAt",  # revision 0014
        "expiredAt",
        "trace",  # revision 0015
    }
    assert columns == seed | added_by_revisions
    assert indexes >= {
        (("pKey", "pKind"), True),
        # Revision 0001's ("pKind", "scheduledAt"), with the id after it (revision 0006: lists).
        (("pKind", "scheduledAt", "id"), False),
        (("pKind", "pKey"), False),  # lists by key prefix (revision 0006)
        (("lockUuid", "id"), False),
        # Polls: due messages by priority, then due time (revision 0009).
        (("pKind", "priority", "scheduledAt", "id"), False),
        # A group's front and waiting messages (revision 0012).
        (("pKind", "messageGroup", "priority", "scheduledAt", "id"), False),
        # The expiry sweep's (revision 0014).
        (("expiresAt",), False),
    }


@pytest.mark.postgresql_only
def test_postgresql_vacuums_the_queue_table_after_a_fixed_number_of_dead_rows(postgresql_url):
    engine = create_engine(postgresql_url)
    try:
        with engine.connect() as connection:
            options = connection.execute(
                text("SELECT reloptions FROM pg_class WHERE relname = 'delayed_queue'")
            ).scalar()
    finally:
        engine.dispose()
    assert "autovacuum_vacuum_threshold=1000" in options
    assert "autovacuum_vacuum_scale_factor=0.01" in options


_SEED_VALUES = {
    "pKey": "k",
    "pKind": "q",
    "payload": b"1",
    "scheduledAt": 5,
    "scheduledAtInitially": 5,
    "createdAt": 1,
}


def test_revision_0004_keeps_existing_messages_both_ways(empty_database_url):
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0003")
    engine = create_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            seed = table("delayed_queue", *(column(name) for name in _SEED_VALUES))
            connection.execute(insert(seed).values(_SEED_VALUES))  # quoted as each database quotes
        command.upgrade(config, "head")
        with engine.connect() as connection:
            row = connection.execute(text("SELECT * FROM delayed_queue")).mappings().one()
        assert (row["pKey"], row["deliveries"], row["deadLetteredFrom"]) == ("k", 0, None)
        command.downgrade(config, "0003")
        with engine.connect() as connection:
            assert not inspect(connection).has_table("delivery_history")
            row = connection.execute(text("SELECT * FROM delayed_queue")).mappings().one()
        assert "deliveries" not in row and row["pKey"] == "k"
        command.upgrade(config, "head")
        command.check(config)
    finally:
        engine.dispose()


@pytest.mark.server_databases
@pytest.mark.parametrize("server", SERVERS)
def test_replicas_migrating_one_new_database_at_once_take_turns(server):
    with scratch_database(server, "replicas") as url:
        replicas = [
            subprocess.Popen(
                [sys.executable, "-m", "app", "migrate"],
                env={**os.environ, "HOURGLASS_DATABASE_URL": url},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        for replica in replicas:  # none fails on a table another one created
            _, errors = replica.communicate(timeout=120)
            assert replica.returncode == 0, errors[-2000:]
        command.check(alembic_config(url))


@pytest.mark.parametrize("server", SERVERS)
def test_an_unmigrated_database_is_503_not_500(server):
    with (
        scratch_database(server, "unmigrated") as url,
        TestClient(create_app(Settings(database_url=url), clock=FakeClock())) as client,
    ):
        response = put(client, "q", "k", 1)
        assert response.status_code == 503
        assert "hourglass migrate" in response.json()["detail"]
        assert client.post("/v1/queues/q/poll").status_code == 503
        assert client.get("/readyz").status_code == 503


def test_revision_0005_indexes_cron_run_keys_on_postgresql_only_both_ways(empty_database_url):
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0004")
    engine = create_engine(empty_database_url)

    def cron_index() -> list[dict]:
        with engine.connect() as connection:
            return [
                index
                for index in inspect(connection).get_indexes("delayed_queue")
                if index["name"] == "delayed_queue__cron_run_keys_idx"
            ]

    try:
        with engine.begin() as connection:
            seed = table("delayed_queue", *(column(name) for name in _SEED_VALUES))
            run = {**_SEED_VALUES, "pKey": "a/0123456789abcdef/20261127-000000.000"}
            connection.execute(insert(seed).values([_SEED_VALUES, run]))
        command.upgrade(config, "head")
        if engine.dialect.name == "postgresql":
            [index] = cron_index()
            assert index["column_names"] == ["pKind", "pKey"]
            options = index["dialect_options"]
            assert options["postgresql_ops"] == {"pKey": "varchar_pattern_ops"}
            assert "________________/___________________" in options["postgresql_where"]
        else:
            assert cron_index() == []
        command.downgrade(config, "0004")
        assert cron_index() == []
        with engine.connect() as connection:
            assert connection.execute(text("SELECT COUNT(*) FROM delayed_queue")).scalar() == 2
        command.upgrade(config, "head")
        command.check(config)
    finally:
        engine.dispose()


def test_revision_0007_adds_retry_settings_and_keeps_existing_ones_both_ways(empty_database_url):
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0006")
    engine = create_engine(empty_database_url)
    settings = {"queue": "q", "maxDeliveries": 3, "updatedAt": 1}
    try:
        with engine.begin() as connection:
            stored = table("queue_settings", *(column(name) for name in settings))
            connection.execute(insert(stored).values(settings))
        command.upgrade(config, "head")
        with engine.connect() as connection:
            row = connection.execute(text("SELECT * FROM queue_settings")).mappings().one()
        assert row["maxDeliveries"] == 3
        retry = ("retryInitialDelayMs", "retryMaxDelayMs", "retryMultiplier", "retryJitter")
        assert [row[name] for name in retry] == [None] * 4  # no policy: due at once, as before
        command.downgrade(config, "0006")
        with engine.connect() as connection:
            row = connection.execute(text("SELECT * FROM queue_settings")).mappings().one()
        assert "retryJitter" not in row and row["maxDeliveries"] == 3
        command.upgrade(config, "head")
        command.check(config)
    finally:
        engine.dispose()


def test_revision_0008_adds_push_settings_and_keeps_existing_ones_both_ways(empty_database_url):
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0007")
    engine = create_engine(empty_database_url)
    settings = {"queue": "q", "maxDeliveries": 3, "retryInitialDelayMs": 5, "updatedAt": 1}
    try:
        with engine.begin() as connection:
            stored = table("queue_settings", *(column(name) for name in settings))
            connection.execute(insert(stored).values(settings))
        command.upgrade(config, "head")
        with engine.connect() as connection:
            row = connection.execute(text("SELECT * FROM queue_settings")).mappings().one()
        assert (row["maxDeliveries"], row["retryInitialDelayMs"]) == (3, 5)
        push = ("pushUrl", "pushTimeoutMs", "pushConcurrency")
        assert [row[name] for name in push] == [None] * 3  # no push, as before
        command.downgrade(config, "0007")
        with engine.connect() as connection:
            row = connection.execute(text("SELECT * FROM queue_settings")).mappings().one()
        assert "pushUrl" not in row and row["retryInitialDelayMs"] == 5
        command.upgrade(config, "head")
        command.check(config)
    finally:
        engine.dispose()


def test_revision_0009_reads_existing_messages_and_entries_as_priority_0_both_ways(
    empty_database_url,
):
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0008")
    engine = create_engine(empty_database_url)
    entry = {
        "queue": "q",
        "name": "e",
        "schedule": '{"every": 60, "timezone": "UTC"}',
        "payload": b"1",
        "configHash": "0123456789abcdef",
        "createdAt": 1,
        "updatedAt": 1,
    }
    try:
        with engine.begin() as connection:
            seed = table("delayed_queue", *(column(name) for name in _SEED_VALUES))
            connection.execute(insert(seed).values(_SEED_VALUES))
            entries = table("cron_entries", *(column(name) for name in entry))
            connection.execute(insert(entries).values(entry))
        command.upgrade(config, "head")
        with engine.connect() as connection:
            message = connection.execute(text("SELECT * FROM delayed_queue")).mappings().one()
            stored = connection.execute(text("SELECT * FROM cron_entries")).mappings().one()
        assert (message["pKey"], message["priority"]) == ("k", 0)
        assert (stored["configHash"], stored["priority"]) == ("0123456789abcdef", 0)
        index = next(
            index
            for index in inspect(engine).get_indexes("delayed_queue")
            if index["name"] == "delayed_queue__kind_priority_scheduled_at_id_idx"
        )
        assert index["column_names"] == ["pKind", "priority", "scheduledAt", "id"]
        command.downgrade(config, "0008")
        with engine.connect() as connection:
            message = connection.execute(text("SELECT * FROM delayed_queue")).mappings().one()
        assert "priority" not in message and message["pKey"] == "k"
        command.upgrade(config, "head")
        command.check(config)
    finally:
        engine.dispose()


def test_revision_0014_down_keeps_the_group_triggers_and_the_poll_index_and_drops_expired(
    empty_database_url,
):
    # SQLite's DROP COLUMN of its own, not a copy of the table (which would lose the groups'
    # triggers and the poll index's DESC); the history's `expired`, which the releases before
    # it do not know, becomes `dropped`.
    config = alembic_config(empty_database_url)
    command.upgrade(config, "head")
    engine = create_engine(empty_database_url)

    def shape() -> tuple[set[str], set[tuple]]:
        """SQLite's triggers and its indexes' own SQL (DESC included); elsewhere, indexes."""
        if engine.dialect.name != "sqlite":
            indexes = inspect(engine).get_indexes("delayed_queue")
            return set(), {(each["name"], tuple(each["column_names"])) for each in indexes}
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'delayed_queue'")
            ).all()
        return {name for kind, name, _ in rows if kind == "trigger"}, {
            (name, sql) for kind, name, sql in rows if kind == "index"
        }

    try:
        fresh = alembic_config(empty_database_url)  # the shape of 0013, built fresh
        command.downgrade(fresh, "base")
        command.upgrade(fresh, "0013")
        before = shape()
        command.upgrade(config, "head")
        history = {
            "queue": "q",
            "key": "k",
            "scheduledAt": 1,
            "createdAt": 1,
            "deliveries": 0,
            "outcome": "expired",
            "finishedAt": 2,
        }
        with engine.begin() as connection:
            recorded = table("delivery_history", *(column(name) for name in history))
            connection.execute(insert(recorded).values(history))
        command.downgrade(config, "0013")
        assert shape() == before
        with engine.connect() as connection:
            outcome = connection.execute(text("SELECT outcome FROM delivery_history")).scalar()
        assert outcome == "dropped"
        if engine.dialect.name == "sqlite":
            assert len(before[0]) == 3  # the groups' triggers (revision 0012)
        command.upgrade(config, "head")
        command.check(config)
    finally:
        engine.dispose()


def test_revision_0015_adds_trace_in_place_and_keeps_messages_both_ways(empty_database_url):
    # Existing messages read as carrying no trace; PostgreSQL adds the column without
    # rewriting the table (its file stays the same), MariaDB instantly (InnoDB's table id
    # stays the same: a rebuild, in place or by copy, makes a new table); down again,
    # SQLite keeps its triggers and indexes as they were (its own DROP COLUMN), and the
    # message stays.
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0014")
    engine = create_engine(empty_database_url)

    def shape() -> set[tuple]:
        if engine.dialect.name != "sqlite":
            indexes = inspect(engine).get_indexes("delayed_queue")
            return {(each["name"], tuple(each["column_names"])) for each in indexes}
        with engine.connect() as connection:
            return set(
                connection.execute(
                    text(
                        "SELECT type, name, sql FROM sqlite_master WHERE tbl_name = 'delayed_queue'"
                    )
                ).all()
            )

    def table_file() -> int | None:
        queries = {
            "postgresql": "SELECT relfilenode FROM pg_class WHERE relname = 'delayed_queue'",
            "mariadb": "SELECT table_id FROM information_schema.innodb_sys_tables"
            " WHERE name = CONCAT(DATABASE(), '/delayed_queue')",
        }
        if engine.dialect.name not in queries:
            return None
        with engine.connect() as connection:
            found = connection.execute(text(queries[engine.dialect.name])).scalar_one()
        assert found is not None
        return found

    try:
        with engine.begin() as connection:
            seed = table("delayed_queue", *(column(name) for name in _SEED_VALUES))
            connection.execute(insert(seed).values(_SEED_VALUES))
        before, file_before = shape(), table_file()
        command.upgrade(config, "0015")
        assert table_file() == file_before
        trace = "00-" + "1" * 32 + "-" + "2" * 16 + "-01\nvendor=value"
        with engine.begin() as connection:
            message = connection.execute(text("SELECT * FROM delayed_queue")).mappings().one()
            assert (message["pKey"], message["trace"]) == ("k", None)
            traced = table("delayed_queue", column("trace"))
            connection.execute(traced.update().values(trace=trace))
            stored = connection.execute(text("SELECT * FROM delayed_queue")).mappings().one()
        assert stored["trace"] == trace
        command.downgrade(config, "0014")
        with engine.connect() as connection:
            message = connection.execute(text("SELECT * FROM delayed_queue")).mappings().one()
        assert "trace" not in message and message["pKey"] == "k"
        assert shape() == before
        command.upgrade(config, "head")
        command.check(config)
    finally:
        engine.dispose()
