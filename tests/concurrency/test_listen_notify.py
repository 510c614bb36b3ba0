"""Two replicas on one PostgreSQL database: a long poll on one wakes for what is offered or
released through the other, by LISTEN/NOTIFY (decision 19), and falls back on
re-checks while its listener is away."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import Settings
from app.main import create_app
from app.storage.dialects.postgresql import peers as postgresql_peers
from tests.conftest import truncate_all
from tests.support.helpers import keys_of, poll, put, wait_until

pytestmark = pytest.mark.postgresql_only

# Long enough that only a notification explains a wake-up well before it.
NO_RECHECK = 20.0
WAIT = 15  # a long poll's wait, seconds
# A wake-up by notification takes milliseconds; this bound is loose for a busy machine,
# and far below NO_RECHECK.
PROMPTLY = 2.0
STATE_TIMEOUT = 10.0


@contextmanager
def replica(url: str, **overrides: Any) -> Iterator[TestClient]:
    """One replica (an app with the system clock) over HTTP, listening once it is yielded."""
    settings = Settings(database_url=url, auto_migrate=False, **overrides)
    with TestClient(create_app(settings)) as client:
        wait_until(lambda: client.app.state.peers.listening, STATE_TIMEOUT, "the listener")
        yield client


def waiting(client: TestClient) -> threading.Event:
    """Set each time a long poll of `client` starts to wait (after a look found nothing)."""
    notifier = client.app.state.service.notifier
    started = threading.Event()
    wait = notifier.wait

    async def noted_wait(ticket: asyncio.Event, timeout: float) -> None:
        started.set()
        await wait(ticket, timeout)

    notifier.wait = noted_wait
    return started


def long_poll(pool: ThreadPoolExecutor, client: TestClient, queue: str) -> Future:
    """A long poll on `client`, in a thread: its answer, and when it came (monotonic)."""

    def call() -> tuple[dict[str, Any], float]:
        answer = poll(client, queue, wait=WAIT)
        return answer, time.monotonic()

    return pool.submit(call)


@contextmanager
def two_replicas(
    url: str, **overrides: Any
) -> Iterator[tuple[TestClient, TestClient, ThreadPoolExecutor]]:
    """Two replicas on one database, and a thread for a long poll."""
    with (
        replica(url, **overrides) as first,
        replica(url, **overrides) as second,
        ThreadPoolExecutor(1) as pool,
    ):
        yield first, second, pool


def answer_after(
    pool: ThreadPoolExecutor, client: TestClient, queue: str, act: Callable[[], object]
) -> tuple[dict[str, Any], float]:
    """A long poll of `queue` on `client`; once it waits, `act()`: the poll's answer, and
    the seconds from the end of `act` to it."""
    started = waiting(client)
    polled = long_poll(pool, client, queue)
    assert started.wait(STATE_TIMEOUT)
    act()
    acted = time.monotonic()
    answer, answered = polled.result(WAIT + 5)
    return answer, answered - acted


def offering(client: TestClient, queue: str, key: str) -> Callable[[], None]:
    """An offer of `key`, due now, through `client`, to be made later."""

    def offer() -> None:
        assert put(client, queue, key, 1).status_code == 201

    return offer


def listener_pids(url: str) -> list[int]:
    return backend_pids(url, postgresql_peers.LISTENER_NAME)


def backend_pids(url: str, name: str) -> list[int]:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            return list(
                connection.execute(
                    text(
                        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                        "AND application_name = :name"
                    ),
                    {"name": name},
                ).scalars()
            )
    finally:
        engine.dispose()


def terminate(url: str, pids: list[int]) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            for pid in pids:
                # With a timeout, pg_terminate_backend waits until the backend has exited.
                assert connection.execute(
                    text("SELECT pg_terminate_backend(:pid, 10000)"), {"pid": pid}
                ).scalar()
    finally:
        engine.dispose()


def test_a_poll_on_one_replica_wakes_at_once_for_an_offer_through_the_other(postgresql_url):
    truncate_all(postgresql_url)
    with two_replicas(postgresql_url, poll_recheck_seconds=NO_RECHECK) as (first, second, pool):
        answer, late = answer_after(pool, second, "q", offering(first, "q", "now"))
        assert keys_of(answer) == ["now"]
        assert late < PROMPTLY


def test_the_link_connects_when_the_url_names_its_own_application(postgresql_url):
    """The URL's query goes to the peers' connections too: an `application_name` there
    gives way to theirs instead of ending their tasks."""
    truncate_all(postgresql_url)
    url = make_url(postgresql_url).update_query_dict({"application_name": "the-app"})
    named = url.render_as_string(hide_password=False)
    with replica(named) as first, replica(named) as second:
        assert first.app.state.peers.listening and second.app.state.peers.listening
        assert len(listener_pids(postgresql_url)) == 2


def test_a_message_due_soon_is_delivered_at_its_due_time_not_at_the_recheck(postgresql_url):
    truncate_all(postgresql_url)
    with two_replicas(postgresql_url, poll_recheck_seconds=NO_RECHECK) as (first, second, pool):
        started = waiting(second)
        polled = long_poll(pool, second, "q")
        assert started.wait(STATE_TIMEOUT)
        before = time.monotonic()
        assert put(first, "q", "soon", 1, delay=2).status_code == 201
        after = time.monotonic()
        answer, answered = polled.result(WAIT + 5)
        assert keys_of(answer) == ["soon"]
        # Due 2 s after the offer (made between `before` and `after`), delivered then.
        assert before + 2 - 0.01 <= answered <= after + 2 + PROMPTLY / 2


def test_a_release_through_one_replica_wakes_a_poll_on_the_other(postgresql_url):
    truncate_all(postgresql_url)
    with two_replicas(postgresql_url, poll_recheck_seconds=NO_RECHECK) as (first, second, pool):
        assert put(first, "q", "given-back", 1).status_code == 201
        lock_id = poll(first, "q", lease=300)["lock_id"]

        def release() -> None:
            assert first.post(f"/v1/queues/q/locks/{lock_id}/release").status_code == 204

        answer, late = answer_after(pool, second, "q", release)
        assert keys_of(answer) == ["given-back"]
        assert late < PROMPTLY


def test_an_acknowledgement_through_one_replica_wakes_a_poll_held_back_by_max_leased_on_the_other(
    postgresql_url,
):
    # docs/guide/flow-control.md: a long poll that max_leased holds back waits for room, and an
    # acknowledgement through any replica frees it at once (not at the re-check).
    truncate_all(postgresql_url)
    with two_replicas(postgresql_url, poll_recheck_seconds=NO_RECHECK) as (first, second, pool):
        settings = first.put("/v1/queues/q/settings", json={"max_leased": 1})
        assert settings.status_code == 200, settings.text
        assert put(first, "q", "held", 1).status_code == 201
        assert put(first, "q", "waiting", 1).status_code == 201
        lock_id = poll(first, "q", lease=300)["lock_id"]

        def acknowledge() -> None:
            assert first.delete(f"/v1/queues/q/locks/{lock_id}").status_code == 204

        answer, late = answer_after(pool, second, "q", acknowledge)
        assert keys_of(answer) == ["waiting"]
        assert late < PROMPTLY


def test_only_messages_due_within_the_longest_wait_are_told_to_peers(postgresql_url):
    truncate_all(postgresql_url)
    with (
        replica(postgresql_url) as first,
        psycopg.connect(_libpq(postgresql_url), autocommit=True) as listening,
    ):
        listening.execute(f"LISTEN {postgresql_peers.CHANNEL}")
        assert put(first, "later", "a", 1, delay=21).status_code == 201
        assert put(first, "within", "b", 1, delay=19).status_code == 201
        assert put(first, "now", "c", 1).status_code == 201
        told = _told_until(listening, "now")
        assert "later" not in told
        assert sorted(set(told)) == ["now", "within"]


def test_an_offer_that_is_rolled_back_tells_nothing(postgresql_url):
    truncate_all(postgresql_url)
    with (
        replica(postgresql_url, lock_timeout=0.2) as first,
        psycopg.connect(_libpq(postgresql_url), autocommit=True) as listening,
        psycopg.connect(_libpq(postgresql_url)) as holding,
    ):
        listening.execute(f"LISTEN {postgresql_peers.CHANNEL}")
        assert put(first, "rolled-back", "x", 1).status_code == 201
        _told_until(listening, "rolled-back")
        # The update's transaction waits for the row's lock, gives up and is rolled back.
        holding.execute(
            'SELECT 1 FROM delayed_queue WHERE "pKey" = %s FOR UPDATE', ("x",)
        ).fetchall()
        assert put(first, "rolled-back", "x", 2).status_code == 503
        holding.rollback()
        # Nothing written, nothing told either.
        assert first.post("/v1/queues/missing/messages/x", json={"payload": 1}).status_code == 404
        assert put(first, "now", "c", 1).status_code == 201
        assert _told_until(listening, "now") == ["now"]


def test_the_listener_survives_the_end_of_its_connection(postgresql_url, monkeypatch):
    truncate_all(postgresql_url)
    reconnect = threading.Event()

    async def held(failures: int) -> None:
        # The listener stays away until the test lets it connect again.
        await asyncio.to_thread(reconnect.wait)

    monkeypatch.setattr(postgresql_peers, "pause_after", held)
    with two_replicas(postgresql_url, poll_recheck_seconds=NO_RECHECK) as (first, second, pool):
        peers = second.app.state.peers
        terminate(postgresql_url, listener_pids(postgresql_url))
        wait_until(lambda: not peers.listening, STATE_TIMEOUT, "the listener's loss")
        assert b"hourglass_listener_connected 0.0" in second.get("/metrics").content

        # Meanwhile a poll on the second replica misses the first's offer…
        started = waiting(second)
        polled = long_poll(pool, second, "q")
        assert started.wait(STATE_TIMEOUT)
        assert put(first, "q", "while-away", 1).status_code == 201
        assert not polled.done()
        # …until the listener is back: every waiting poll then looks again.
        reconnect.set()
        reconnected = time.monotonic()
        answer, answered = polled.result(WAIT + 5)
        assert keys_of(answer) == ["while-away"]
        assert answered - reconnected < PROMPTLY
        assert peers.listening
        metrics = second.get("/metrics").content
        assert b"hourglass_listener_connected 1.0" in metrics
        assert b"hourglass_listener_reconnects_total 1.0" in metrics

        # Afterwards, wake-ups are immediate again.
        answer, late = answer_after(pool, second, "q", offering(first, "q", "after"))
        assert keys_of(answer) == ["after"]
        assert late < PROMPTLY


def test_a_notification_whose_connection_died_is_sent_again_on_a_new_one(postgresql_url):
    truncate_all(postgresql_url)
    with two_replicas(postgresql_url, poll_recheck_seconds=NO_RECHECK) as (first, second, pool):
        assert put(first, "warm-up", "a", 1).status_code == 201  # opens the sender
        wait_until(
            lambda: len(backend_pids(postgresql_url, postgresql_peers.SENDER_NAME)) == 1,
            STATE_TIMEOUT,
            "the sender's connection",
        )
        terminate(postgresql_url, backend_pids(postgresql_url, postgresql_peers.SENDER_NAME))
        answer, late = answer_after(pool, second, "q", offering(first, "q", "now"))
        assert keys_of(answer) == ["now"]
        assert late < PROMPTLY


def test_without_a_listener_polls_still_find_messages_at_their_rechecks(
    postgresql_url, monkeypatch
):
    truncate_all(postgresql_url)
    reconnect = threading.Event()

    async def held(failures: int) -> None:
        await asyncio.to_thread(reconnect.wait)

    monkeypatch.setattr(postgresql_peers, "pause_after", held)
    recheck = 1.0
    with two_replicas(postgresql_url, poll_recheck_seconds=recheck) as (first, second, pool):
        try:
            peers = second.app.state.peers
            terminate(postgresql_url, listener_pids(postgresql_url))
            wait_until(lambda: not peers.listening, STATE_TIMEOUT, "the listener's loss")
            answer, late = answer_after(pool, second, "q", offering(first, "q", "found"))
            assert keys_of(answer) == ["found"]
            assert late < recheck + PROMPTLY
            assert not peers.listening  # found by a re-check, not by a notification
        finally:
            reconnect.set()  # the held listeners' threads end before the apps stop


def test_with_listen_off_a_replica_neither_tells_nor_listens(postgresql_url):
    truncate_all(postgresql_url)
    with (
        replica(postgresql_url) as first,
        TestClient(
            create_app(Settings(database_url=postgresql_url, auto_migrate=False, listen=False))
        ) as quiet,
        psycopg.connect(_libpq(postgresql_url), autocommit=True) as listening,
    ):
        assert quiet.app.state.peers is None
        listening.execute(f"LISTEN {postgresql_peers.CHANNEL}")
        assert put(quiet, "quiet", "a", 1).status_code == 201
        assert put(first, "told", "b", 1).status_code == 201
        told = [n.payload for n in listening.notifies(timeout=STATE_TIMEOUT, stop_after=1)]
        assert told == ["told"]


def _told_until(listening: psycopg.Connection, last: str) -> list[str]:
    """The queues told on `listening` up to `last`."""
    told: list[str] = []
    for notification in listening.notifies(timeout=STATE_TIMEOUT):
        told.append(notification.payload)
        if notification.payload == last:
            return told
    raise AssertionError(f"{last!r} was never told; only {told}")


def _libpq(url: str) -> str:
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
