"""Per-key acknowledge and release racing a lease's expiry and a new poll, on PostgreSQL and
MariaDB (row locks, several connections): a key another poll took is `missing`, and
nothing of it changes, however the two interleave."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine

from app.config import Settings
from app.domain.messages import Offer
from app.storage.blocking import create_blocking_storage
from app.storage.store import Storage
from tests.conftest import START_MS, truncate_all
from tests.support.helpers import INNODB_VIEWS_EVERY_SECONDS, history_rows, stored_rows, wait_until
from tests.support.locking import database_name

pytestmark = pytest.mark.server_databases

LEASE_MS = 30_000
# When both leases of the first poll have run out, and a second poll may take them.
EXPIRED = START_MS + LEASE_MS


@pytest.fixture
def store(server_url: str) -> Iterator[Storage]:
    truncate_all(server_url)
    store = create_blocking_storage(Settings(database_url=server_url, auto_migrate=False))
    yield store
    store.close()


def _offer(store: Storage, keys: list[str]) -> None:
    store.messages.offer_many("q", [Offer(key, b"1", START_MS) for key in keys], START_MS)


def _poll(store: Storage, lock_id: str, now: int, limit: int = 10) -> list[str]:
    claim = store.leases.poll("q", limit, lock_id, now + LEASE_MS, now)
    return [delivery.message.key for delivery in claim.deliveries]


def _waiting_on_a_row_lock(engine: Engine, url: str) -> Callable[[], bool]:
    """Whether a session of the database of `url` waits for a row lock another holds, asked
    on a connection of `engine`."""
    if database_name(url) == "postgresql":
        query = (
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
    else:
        query = "SELECT count(*) FROM information_schema.innodb_lock_waits"

    def waiting() -> bool:
        with engine.connect() as connection:
            return bool(connection.execute(text(query)).scalar())

    return waiting


def _while_a_new_poll_holds(url: str, key: str, call: Callable[[], Any]) -> list[Any]:
    """Run `call` on a thread while another session leases `key` to "new-lock" (one more
    delivery, as a poll's claim does) without committing yet; commit once `call` waits
    for that row; what `call` returned."""
    quote = '"' if database_name(url) == "postgresql" else "`"
    # Disposed at the end: an engine left to the garbage collector keeps its pooled
    # connections open until a collection happens to run, into later tests of this
    # process, which share the database (tests/concurrency/test_import_crash.py counted
    # them once as a killed import's).
    engine = create_engine(url)
    answers: list[Any] = []
    try:
        with engine.connect() as side:
            side.execute(
                text(
                    f"UPDATE delayed_queue SET {quote}lockUuid{quote} = 'new-lock', "
                    f"{quote}scheduledAt{quote} = :until, "
                    f"{quote}deliveries{quote} = {quote}deliveries{quote} + 1 "
                    f"WHERE {quote}pKey{quote} = :key"
                ),
                {"until": EXPIRED + LEASE_MS, "key": key},
            )  # not committed: the poll's transaction is under way
            worker = threading.Thread(target=lambda: answers.append(call()))
            worker.start()
            wait_until(
                _waiting_on_a_row_lock(engine, url),
                10,
                "the call to wait on the re-polled row",
                every=INNODB_VIEWS_EVERY_SECONDS if database_name(url) == "mariadb" else 0.01,
            )
            side.commit()
            worker.join(10)
            assert not worker.is_alive()
    finally:
        engine.dispose()
    return answers


def test_an_acknowledgement_by_key_waiting_on_a_new_poll_finds_its_key_missing(store, server_url):
    _offer(store, ["a", "b"])
    assert _poll(store, "old-lock", START_MS) == ["a", "b"]
    answers = _while_a_new_poll_holds(
        server_url, "a", lambda: store.leases.acknowledge_keys("q", "old-lock", ["a", "b"], EXPIRED)
    )
    assert answers == [["b"]]
    [row] = stored_rows(server_url)
    assert (row["pKey"], row["lockUuid"], row["deliveries"]) == ("a", "new-lock", 2)
    assert [(row["key"], row["outcome"]) for row in history_rows(server_url)] == [
        ("b", "acknowledged")
    ]


def test_a_release_by_key_waiting_on_a_new_poll_finds_its_key_missing(store, server_url):
    _offer(store, ["a", "b"])
    assert _poll(store, "old-lock", START_MS) == ["a", "b"]
    answers = _while_a_new_poll_holds(
        server_url,
        "a",
        lambda: store.leases.release_each("q", "old-lock", lambda _: EXPIRED + 5, ["a", "b"]),
    )
    assert answers == [["b"]]
    rows = {row["pKey"]: row for row in stored_rows(server_url)}
    assert (rows["a"]["lockUuid"], rows["a"]["scheduledAt"]) == ("new-lock", EXPIRED + LEASE_MS)
    assert (rows["b"]["lockUuid"], rows["b"]["scheduledAt"]) == (None, EXPIRED + 5)


def test_a_whole_lock_release_by_deliveries_waiting_on_a_new_poll_leaves_its_row(store, server_url):
    _offer(store, ["a", "b"])
    assert _poll(store, "old-lock", START_MS) == ["a", "b"]
    answers = _while_a_new_poll_holds(
        server_url,
        "a",
        lambda: store.leases.release_each("q", "old-lock", lambda n: EXPIRED + n * 1000),
    )
    assert answers == [["b"]]
    rows = {row["pKey"]: row for row in stored_rows(server_url)}
    assert rows["a"]["lockUuid"] == "new-lock"
    assert (rows["b"]["lockUuid"], rows["b"]["scheduledAt"]) == (None, EXPIRED + 1000)


ROUNDS = 150


def test_acknowledgements_by_key_racing_new_polls_never_delete_what_a_new_lock_holds(
    store, server_url
):
    """Each round: a message whose lease has run out is acknowledged by key by its old
    lock while a new poll takes it, at once. Exactly one of them wins: the key is
    acknowledged and the poll finds nothing, or the poll leases it and the old lock's
    key is missing, the message still there under the new lock."""
    barrier = threading.Barrier(2)
    outcomes = {"acknowledged": 0, "re-polled": 0}
    with ThreadPoolExecutor(2) as pool:
        for index in range(ROUNDS):
            key = f"k{index:03d}"
            _offer(store, [key])
            assert _poll(store, f"old-{index}", START_MS, limit=1) == [key]

            def acknowledge(index: int = index, key: str = key) -> list[str]:
                barrier.wait(10)
                return store.leases.acknowledge_keys("q", f"old-{index}", [key], EXPIRED)

            def poll_again(index: int = index) -> list[str]:
                barrier.wait(10)
                return _poll(store, f"new-{index}", EXPIRED, limit=1)

            acknowledged = pool.submit(acknowledge)
            polled = pool.submit(poll_again)
            acknowledged_keys, polled_keys = acknowledged.result(30), polled.result(30)
            if acknowledged_keys:
                assert (acknowledged_keys, polled_keys) == ([key], [])
                outcomes["acknowledged"] += 1
            else:
                assert polled_keys == [key]
                outcomes["re-polled"] += 1
                # Still there, the new lock's: its acknowledgement takes it.
                assert store.leases.acknowledge_keys("q", f"new-{index}", [key], EXPIRED) == [key]
            assert store.messages.get("q", key) is None
    history = history_rows(server_url)
    assert sorted(row["key"] for row in history) == [f"k{index:03d}" for index in range(ROUNDS)]
    assert {row["outcome"] for row in history} == {"acknowledged"}
    assert sum(outcomes.values()) == ROUNDS
    # Both sides won often (here 47-103 times each in 150): the two really raced.
    assert min(outcomes.values()) > 0, outcomes
