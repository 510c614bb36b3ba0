"""What MariaDB's dialect does differently (docs/decisions/0009-mariadb.md), each with a
test that fails if it stops being true. The rest of the contract runs on MariaDB
like on every database."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from app.config import Settings
from app.domain.errors import PayloadTooLarge
from app.domain.messages import Offer, Outcome
from app.storage.blocking import create_blocking_storage
from app.storage.store import Storage
from tests.conftest import START_MS, truncate_all
from tests.support.helpers import INNODB_VIEWS_EVERY_SECONDS, history_rows, stored_rows, wait_until

pytestmark = pytest.mark.server_databases


@pytest.fixture
def store(mariadb_url: str) -> Iterator[Storage]:
    truncate_all(mariadb_url)
    store = create_blocking_storage(Settings(database_url=mariadb_url, auto_migrate=False))
    yield store
    store.close()


def test_insert_ignore_hides_nothing_but_existing_keys(store, mariadb_url):
    """IGNORE would cut a key too long for its column and store it: the warnings are
    read, and the statement fails with its transaction instead."""
    taken = [Offer(f"k{index:03d}", b"1", START_MS) for index in range(100)]
    assert set(store.messages.offer_many("q", taken, START_MS)) == {Outcome.CREATED}
    too_long = Offer("x" * 201, b"1", START_MS)  # the API refuses it; the store must too
    with pytest.raises(Exception, match="would have hidden 1265"):
        store.messages.offer_many("q", [too_long], START_MS)
    # 100 duplicate-key warnings first: more than SHOW WARNINGS lists by default (64).
    with pytest.raises(Exception, match="would have hidden 1265"):
        store.messages.offer_many("q", [*taken, Offer("new", b"1", START_MS), too_long], START_MS)
    assert sorted(row["pKey"] for row in stored_rows(mariadb_url)) == [o.key for o in taken]


def test_an_acknowledgement_records_only_what_it_deleted(store, mariadb_url):
    """The row is leased again while the acknowledgement waits for its lock: the old
    lock deletes nothing, and records nothing (INSERT … SELECT first would have
    recorded it from a non-locking read)."""
    store.messages.offer_many("q", [Offer("k", b"1", START_MS)], START_MS)
    claim = store.leases.poll("q", 1, "old-lock", START_MS + 1_000, START_MS)
    assert [delivery.message.key for delivery in claim.deliveries] == ["k"]

    engine = create_engine(mariadb_url)  # disposed below: its connections end with the test
    side = engine.connect()
    try:
        side.execute(text("UPDATE delayed_queue SET `lockUuid` = 'new-lock'"))  # not committed
        acknowledged: list[int] = []
        ack = threading.Thread(
            target=lambda: acknowledged.append(store.leases.acknowledge("q", "old-lock", START_MS))
        )
        ack.start()
        with engine.connect() as watcher:
            wait_until(
                lambda: bool(
                    watcher.execute(
                        text("SELECT count(*) FROM information_schema.innodb_lock_waits")
                    ).scalar()
                ),
                10,
                "the acknowledgement to wait on the row",
                every=INNODB_VIEWS_EVERY_SECONDS,
            )
        side.commit()
        ack.join(10)
    finally:
        side.close()
        engine.dispose()
    assert acknowledged == [0]
    assert history_rows(mariadb_url) == []
    assert [row["lockUuid"] for row in stored_rows(mariadb_url)] == ["new-lock"]


def test_transactions_run_at_read_committed(store):
    with store.engine.connect() as connection:
        assert connection.execute(text("SELECT @@tx_isolation")).scalar() == "READ-COMMITTED"
        assert connection.execute(text("SELECT @@innodb_lock_wait_timeout")).scalar() == 5


def test_a_purge_past_one_page_removes_and_records_every_message(store, mariadb_url):
    offers = [Offer(f"k{index:05d}", b"1", START_MS) for index in range(2_500)]
    for start in range(0, len(offers), 1000):
        store.messages.offer_many("q", offers[start : start + 1000], START_MS)
    store.messages.offer_many("other", [Offer("stays", b"1", START_MS)], START_MS)
    assert store.messages.purge("q", START_MS + 1) == 2_500
    assert [row["pKey"] for row in stored_rows(mariadb_url)] == ["stays"]
    history = history_rows(mariadb_url)
    assert len(history) == 2_500 and len({row["key"] for row in history}) == 2_500
    assert {(row["queue"], row["outcome"]) for row in history} == {("q", "dropped")}


def test_a_batch_of_large_payloads_stays_below_the_packet_limit(store, mariadb_url):
    """mysqlclient escapes values into the statement's text: 60 payloads of 250 KB of
    quotes would be a 30 MB INSERT, past max_allowed_packet (16 MiB)."""
    with store.engine.connect() as connection:
        limit = connection.execute(text("SELECT @@max_allowed_packet")).scalar()
    assert limit < 30_000_000, "the server takes the whole batch: this test proves nothing"
    payload = b'"' + b'\\"' * 125_000 + b'"'  # a JSON string of quotes, escaped again on the wire
    offers = [Offer(f"big-{index}", payload, START_MS) for index in range(60)]
    assert set(store.messages.offer_many("q", offers, START_MS)) == {Outcome.CREATED}
    assert set(store.messages.offer_many("q", offers, START_MS)) == {Outcome.IGNORED}
    assert len(stored_rows(mariadb_url)) == 60


def test_a_payload_past_the_server_packet_size_is_refused_before_anything_is_written(
    store, mariadb_url
):
    with store.engine.connect() as connection:
        packet = connection.execute(text("SELECT @@max_allowed_packet")).scalar()
    assert store.dialect.packet_bytes == packet  # learnt from the server
    store.dialect.packet_bytes = 20_000  # as a server configured with a small packet
    big = Offer("big", b'"' + b"x" * 9_000 + b'"', START_MS)
    with pytest.raises(PayloadTooLarge, match="max_allowed_packet"):
        store.messages.offer("q", big, START_MS)
    with pytest.raises(PayloadTooLarge):
        store.messages.offer_many("q", [Offer("small", b"1", START_MS), big], START_MS)
    assert stored_rows(mariadb_url) == []
