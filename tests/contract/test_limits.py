"""A queue's `max_leased` and `rate` (docs/guide/flow-control.md), on every database: the settings
and their 422s, polls that take what the limits leave, long polls that wait for room and
wake when it frees (an acknowledgement, a release, a lease running out, the rate's window
moving on) without looking in between, push held to `max_leased`, and the held-back
counter. Two replicas: tests/concurrency/test_limits_replicas.py."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, select, text

from app.domain.messages import Limit, Offer, QueueSettings, Rate
from app.main import create_app
from app.storage.tables import delayed_queue, delivery_starts
from tests.conftest import START_MS
from tests.contract.test_bounds import LONG, MARGIN, SHORT, bounded_client
from tests.contract.test_long_poll import RETURNED_EARLY, WAIT, WaitingPolls
from tests.contract.test_push import service_for
from tests.support.helpers import keys_of, poll, put, settings_rows, stored_rows
from tests.support.locking import database_name
from tests.support.push_endpoint import Answer, running_endpoint

EMPTY_POLL = {"lock_id": None, "messages": []}


def configure(client, queue: str = "q", **fields) -> dict:
    response = client.put(f"/v1/queues/{queue}/settings", json=fields)
    assert response.status_code == 200, response.text
    return response.json()


def offer(client, count: int, queue: str = "q") -> None:
    messages = [{"key": f"k{index:02d}", "payload": index} for index in range(count)]
    response = client.post(f"/v1/queues/{queue}/batch", json={"messages": messages})
    assert response.status_code == 200, response.text


def acknowledge(client, lock_id: str, queue: str = "q") -> None:
    assert client.delete(f"/v1/queues/{queue}/locks/{lock_id}").status_code == 204


# -- the settings ---------------------------------------------------------------------


def test_the_limits_are_stored_answered_and_null_by_default(client, database):
    defaults = client.get("/v1/queues/q/settings").json()
    assert (defaults["max_leased"], defaults["rate"]) == (None, None)
    stored = configure(client, max_leased=5, rate={"limit": 20, "period": 1.5})
    assert (stored["max_leased"], stored["rate"]) == (5, {"limit": 20, "period": 1.5})
    assert client.get("/v1/queues/q/settings").json()["rate"] == {"limit": 20, "period": 1.5}
    (row,) = settings_rows(database.url)
    assert (row["maxLeased"], row["rateLimit"], row["ratePeriodMs"]) == (5, 20, 1500)
    # A PUT replaces the settings whole: limits left out go.
    cleared = configure(client, max_deliveries=3)
    assert (cleared["max_leased"], cleared["rate"]) == (None, None)
    (row,) = settings_rows(database.url)
    assert (row["maxLeased"], row["rateLimit"], row["ratePeriodMs"]) == (None, None, None)


@pytest.mark.parametrize(
    "fields",
    [
        {"max_leased": 0},
        {"max_leased": 100_001},
        {"max_leased": 2.5},
        {"max_leased": "5"},
        {"max_leased": True},
        {"rate": {"limit": 0, "period": 1}},
        {"rate": {"limit": 100_001, "period": 1}},
        {"rate": {"limit": 10}},
        {"rate": {"period": 1}},
        {"rate": {"limit": 10, "period": 0}},
        {"rate": {"limit": 10, "period": 0.0005}},
        {"rate": {"limit": 10, "period": 86_401}},
        {"rate": {"limit": 10, "period": "1"}},
        {"rate": {"limit": 10, "period": 1, "burst": 2}},
        {"rate": 10},
    ],
)
def test_limits_out_of_range_are_refused_and_nothing_written(client, database, fields):
    response = client.put("/v1/queues/q/settings", json=fields)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert settings_rows(database.url) == []


def test_the_edges_of_the_ranges_are_taken(client):
    assert configure(client, max_leased=100_000)["max_leased"] == 100_000
    assert configure(client, max_leased=1.0)["max_leased"] == 1  # a whole number
    rate = configure(client, rate={"limit": 100_000, "period": 0.001})["rate"]
    assert rate == {"limit": 100_000, "period": 0.001}
    assert configure(client, rate={"limit": 1, "period": 86_400})["rate"]["period"] == 86_400


# -- max_leased -----------------------------------------------------------------------


def test_polls_take_only_the_room_max_leased_leaves(client):
    configure(client, max_leased=3)
    offer(client, 10)
    first = poll(client, "q", max=2, lease=60)
    assert keys_of(first) == ["k00", "k01"]
    assert keys_of(poll(client, "q", max=10, lease=60)) == ["k02"]
    assert poll(client, "q", max=10) == EMPTY_POLL
    assert client.get("/v1/queues/q").json()["leased"] == 3
    acknowledge(client, first["lock_id"])  # two leases end: room for two
    assert keys_of(poll(client, "q", max=10, lease=60)) == ["k03", "k04"]
    assert poll(client, "q") == EMPTY_POLL


def test_a_release_or_a_lease_that_runs_out_frees_room(client, clock):
    configure(client, max_leased=2)
    offer(client, 5)
    short = poll(client, "q", lease=10)
    long = poll(client, "q", lease=60)
    assert keys_of(short) + keys_of(long) == ["k00", "k01"]
    assert poll(client, "q") == EMPTY_POLL
    assert client.post(f"/v1/queues/q/locks/{long['lock_id']}/release").status_code == 204
    assert keys_of(poll(client, "q", lease=60)) == ["k01"]  # released, due again
    assert poll(client, "q") == EMPTY_POLL
    clock.advance(9.999)
    assert poll(client, "q") == EMPTY_POLL  # the short lease has a millisecond left
    clock.advance(0.001)
    # Ran out: room for one (k02, due before k00's lease ended).
    assert keys_of(poll(client, "q", max=5, lease=60)) == ["k02"]


def test_a_limit_holds_back_only_its_own_queue(client):
    configure(client, max_leased=1)
    offer(client, 3)
    offer(client, 3, queue="other")
    assert keys_of(poll(client, "q", max=3, lease=60)) == ["k00"]
    assert keys_of(poll(client, "other", max=3, lease=60)) == ["k00", "k01", "k02"]


def test_messages_of_another_queue_s_leases_do_not_count(client):
    configure(client, "q", max_leased=2)
    offer(client, 3, queue="other")
    poll(client, "other", max=3, lease=60)
    offer(client, 3)
    assert keys_of(poll(client, "q", max=3, lease=60)) == ["k00", "k01"]


def test_scheduled_messages_are_not_leases(client, clock):
    configure(client, max_leased=1)
    put(client, "q", "later", 1, delay=60)
    put(client, "q", "now", 1)
    assert keys_of(poll(client, "q", max=2, lease=60)) == ["now"]


def test_a_waiting_poll_wakes_when_an_acknowledgement_frees_room(clean_database, clock):
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    with TestClient(create_app(settings, clock=clock)) as client:
        waiting = WaitingPolls(client.app.state.service)
        configure(client, max_leased=1)
        offer(client, 2)
        held = poll(client, "q", lease=60)
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(poll, client, "q", wait=WAIT)
            waiting.wait_for(1)
            acknowledge(client, held["lock_id"])
            assert keys_of(result.result(timeout=RETURNED_EARLY)) == ["k01"]


def test_a_waiting_poll_looks_again_when_a_lease_runs_out_and_not_before(clean_database, clock):
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    with TestClient(create_app(settings, clock=clock)) as client:
        waiting = WaitingPolls(client.app.state.service)
        configure(client, max_leased=1)
        offer(client, 2)
        poll(client, "q", lease=1)  # runs out a second on (the fake clock's)
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(poll, client, "q", max=2, wait=WAIT)
            waiting.wait_for(1)
            clock.advance(1)
            # A second on the loop's clock, then a look: the lease ran out, and the
            # limit leaves room for one (k01, due before k00 came due again).
            assert keys_of(result.result(timeout=RETURNED_EARLY)) == ["k01"]
        assert waiting._count <= 2  # one wait until the lease's end: no busy loop


# -- extends in a queue with max_leased ------------------------------------------------------


def extend(client, lock_id: str, lease: float = 60, queue: str = "q"):
    return client.patch(f"/v1/queues/{queue}/locks/{lock_id}", json={"lease": lease})


def test_an_extend_keeps_a_live_lease_whatever_the_room(client, clock):
    configure(client, max_leased=1)
    offer(client, 2)
    held = poll(client, "q", lease=10)
    clock.advance(9.999)
    assert extend(client, held["lock_id"]).status_code == 200  # a millisecond left
    clock.advance(59.999)
    assert poll(client, "q") == EMPTY_POLL  # still leased: no room


def test_an_extend_revives_a_lease_that_ran_out_while_there_is_room(client, clock):
    configure(client, max_leased=1)
    offer(client, 2)
    held = poll(client, "q", lease=10)
    clock.advance(10)  # ran out; no poll has retaken k00
    answer = extend(client, held["lock_id"])
    assert answer.status_code == 200, answer.text
    assert client.get("/v1/queues/q").json()["leased"] == 1
    assert poll(client, "q", max=2) == EMPTY_POLL  # leased again: it takes the room


def test_an_extend_of_a_lease_that_ran_out_is_refused_when_there_is_no_room(client, clock):
    configure(client, max_leased=1)
    offer(client, 2)
    held = poll(client, "q", lease=10)
    clock.advance(10)
    # k00's lease ran out, which left room for one: k01 (due first) takes it.
    assert keys_of(poll(client, "q", max=2, lease=60)) == ["k01"]
    answer = extend(client, held["lock_id"])
    assert answer.status_code == 404, answer.text
    assert answer.headers["content-type"] == "application/problem+json"
    assert "max_leased" in answer.json()["detail"]
    assert client.get("/v1/queues/q").json()["leased"] == 1  # nothing changed
    k00 = client.get("/v1/queues/q/messages/k00").json()
    assert k00["state"] == "ready"
    # The lock still holds k00 until a poll retakes it: its holder may acknowledge it.
    acknowledge(client, held["lock_id"])
    assert client.get("/v1/queues/q/messages/k00").status_code == 404


def test_an_extend_revives_a_lease_that_ran_out_in_a_queue_without_max_leased(client, clock):
    configure(client, rate={"limit": 10, "period": 1})
    offer(client, 1)
    held = poll(client, "q", lease=10)
    clock.advance(11)
    assert extend(client, held["lock_id"]).status_code == 200
    assert client.get("/v1/queues/q").json()["leased"] == 1


def test_an_extend_of_a_lock_that_holds_nothing_is_404_in_a_limited_queue(client):
    configure(client, max_leased=1)
    assert extend(client, "not-a-lock").status_code == 404
    assert extend(client, str(uuid.uuid4())).status_code == 404


def test_an_extend_reads_the_time_once_it_has_its_turn(store):
    # A claim that went before it counted a lease as run out by the claim's own time; the
    # extend's time, read after, is no earlier, so it cannot keep that lease alive.
    settings = store.settings.put(QueueSettings("q", updated_at=START_MS, max_leased=1))
    store.messages.offer_many("q", [Offer("k0", b"1", START_MS)], START_MS)
    lock_id = str(uuid.uuid4())
    store.leases.poll("q", 1, lock_id, START_MS + 1_000, START_MS, settings)
    heard: list[str] = []
    store.listen_statements(lambda _statement: heard.append("statement"))

    def clock() -> int:
        heard.append("clock")
        return START_MS + 500

    extended, until = store.leases.extend_within_limits("q", lock_id, 60_000, clock)
    assert (extended, until) == (1, START_MS + 60_500)
    assert heard[0] == "statement" and heard.count("clock") == 1  # the turn, then the time


# -- what a queue without limits pays: nothing ---------------------------------------------


def test_a_queue_without_limits_claims_with_the_statements_of_one_without_settings(store):
    plain = store.settings.put(QueueSettings("q", updated_at=START_MS, retry=None))
    store.messages.offer_many("q", [Offer(f"k{i}", b"1", START_MS) for i in range(4)], START_MS)
    heard: list[str] = []
    store.listen_statements(heard.append)
    _poll(store, plain, START_MS, limit=2)
    with_settings = heard[:]
    heard.clear()
    store.leases.poll("q", 2, str(uuid.uuid4()), START_MS + 60_000, START_MS)
    assert heard == with_settings
    assert not any("queue_settings" in text or "delivery_starts" in text for text in with_settings)


def test_an_extend_in_a_queue_without_limits_sends_one_statement(client):
    offer(client, 1)
    held = poll(client, "q", lease=10)  # the queue's settings are read, and kept
    heard: list[str] = []
    client.app.state.service.storage.listen_statements(heard.append)
    assert extend(client, held["lock_id"]).status_code == 200
    # Only the extend's one UPDATE, no turn on the settings row (the service's periodic
    # work may send statements of its own meanwhile: those are left aside).
    extends = [text for text in heard if text.startswith("UPDATE delayed_queue")]
    assert len(extends) == 1, heard
    turns = [text for text in heard if "ratePeriodMs" in text and "pushUrl" not in text]
    assert turns == [], heard


# -- rate -----------------------------------------------------------------------------


def test_polls_take_only_what_the_rate_s_window_leaves(client, clock):
    configure(client, rate={"limit": 3, "period": 10})
    offer(client, 10)
    assert keys_of(poll(client, "q", lease=60)) == ["k00"]
    clock.advance(5)
    assert keys_of(poll(client, "q", max=10, lease=60)) == ["k01", "k02"]
    assert poll(client, "q") == EMPTY_POLL
    clock.advance(4.999)
    assert poll(client, "q") == EMPTY_POLL  # the first delivery is 9.999 s old
    clock.advance(0.001)
    assert keys_of(poll(client, "q", max=10, lease=60)) == ["k03"]  # it left the window
    assert poll(client, "q") == EMPTY_POLL
    clock.advance(5)
    assert keys_of(poll(client, "q", max=10, lease=60)) == ["k04", "k05"]


def test_every_delivery_counts_against_the_rate_redeliveries_too(client, clock):
    configure(client, rate={"limit": 2, "period": 10})
    offer(client, 3)
    first = poll(client, "q", lease=60)
    assert client.post(f"/v1/queues/q/locks/{first['lock_id']}/release").status_code == 204
    assert keys_of(poll(client, "q", max=3, lease=60)) == ["k00"]  # redelivered: the second
    assert poll(client, "q") == EMPTY_POLL


def test_a_waiting_poll_looks_again_when_the_window_moves_on_and_not_before(clean_database, clock):
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    with TestClient(create_app(settings, clock=clock)) as client:
        waiting = WaitingPolls(client.app.state.service)
        configure(client, rate={"limit": 1, "period": 0.5})
        offer(client, 2)
        assert keys_of(poll(client, "q", lease=60)) == ["k00"]
        with ThreadPoolExecutor(1) as pool:
            result = pool.submit(poll, client, "q", wait=WAIT)
            waiting.wait_for(1)
            clock.advance(0.5)
            assert keys_of(result.result(timeout=RETURNED_EARLY)) == ["k01"]
        assert waiting._count <= 2  # one wait until the window's end: no busy loop


def test_both_limits_at_once_take_the_smaller_room(client, clock):
    configure(client, max_leased=2, rate={"limit": 3, "period": 10})
    offer(client, 10)
    first = poll(client, "q", max=10, lease=60)
    assert len(first["messages"]) == 2  # max_leased
    acknowledge(client, first["lock_id"])
    assert len(poll(client, "q", max=10, lease=60)["messages"]) == 1  # the rate's third


def test_the_held_back_counter_counts_polls_a_limit_cut_short(client, clock):
    configure(client, max_leased=1)
    configure(client, "rated", rate={"limit": 1, "period": 10})
    offer(client, 3)
    offer(client, 3, queue="rated")
    poll(client, "q", max=2, lease=60)  # took one of two: held back
    poll(client, "q", lease=60)  # nothing: held back
    poll(client, "rated", lease=60)  # asked for one, took one: not held back
    poll(client, "rated", lease=60)
    metrics = client.get("/metrics").text
    assert 'hourglass_polls_held_back_total{limit="max_leased",queue="q"} 2.0' in metrics
    assert 'hourglass_polls_held_back_total{limit="rate",queue="rated"} 1.0' in metrics


def test_a_poll_that_finds_less_than_the_room_is_not_held_back(client):
    configure(client, max_leased=5)
    offer(client, 2)
    assert len(poll(client, "q", max=10, lease=60)["messages"]) == 2
    assert "hourglass_polls_held_back_total{" not in client.get("/metrics").text


# -- in storage, by the millisecond -----------------------------------------------------


def _poll(store, settings: QueueSettings, now: int, limit: int = 10):
    return store.leases.poll("q", limit, str(uuid.uuid4()), now + 60_000, now, settings)


def test_the_rate_s_window_slides_by_the_millisecond_and_says_when_it_has_room(store):
    settings = store.settings.put(
        QueueSettings("q", updated_at=START_MS, rate=Rate(limit=2, period_ms=1_000))
    )
    store.messages.offer_many("q", [Offer(f"k{i}", b"1", START_MS) for i in range(6)], START_MS)
    assert len(_poll(store, settings, START_MS, limit=1).deliveries) == 1
    assert len(_poll(store, settings, START_MS + 400).deliveries) == 1
    held = _poll(store, settings, START_MS + 999)
    assert (held.deliveries, held.held_back_by, held.room_at) == ([], Limit.RATE, START_MS + 1_000)
    assert len(_poll(store, settings, START_MS + 1_000).deliveries) == 1
    held = _poll(store, settings, START_MS + 1_001)
    assert (held.deliveries, held.room_at) == ([], START_MS + 1_400)
    # Rows that left the window are pruned by the claims: at most what is in it stays.
    with store.engine.connect() as connection:
        assert len(connection.execute(delivery_starts.select()).all()) <= 2


def test_a_claim_that_waited_for_its_turn_counts_and_leases_from_when_it_claims(store):
    # The poll read the time (START_MS) before it waited for the queue's turn; it claims
    # two seconds later. Counted at the time read first, the window would still hold the
    # delivery half a second before it and take nothing; the deliveries it makes would
    # stand in that earlier window (a rate broken under load, across replicas).
    settings = store.settings.put(
        QueueSettings("q", updated_at=START_MS, rate=Rate(limit=1, period_ms=1_000))
    )
    due = START_MS - 1_000
    store.messages.offer_many("q", [Offer(f"k{i}", b"1", due) for i in range(3)], due)
    assert len(_poll(store, settings, START_MS - 500, limit=1).deliveries) == 1
    claimed_at = START_MS + 2_000
    claim = store.leases.poll(
        "q", 5, str(uuid.uuid4()), START_MS + 60_000, START_MS, settings, clock=lambda: claimed_at
    )
    ((delivery,), held_back) = claim.deliveries, (claim.held_back_by, claim.room_at)
    assert held_back == (Limit.RATE, claimed_at + 1_000)
    assert claim.lease_until == delivery.message.scheduled_at == claimed_at + 60_000
    with store.engine.connect() as connection:
        starts = [row.startedAt for row in connection.execute(delivery_starts.select())]
        first = connection.execute(
            select(delayed_queue.c.firstDeliveredAt).where(
                delayed_queue.c.pKey == delivery.message.key
            )
        ).scalar_one()
    assert first == claimed_at
    assert claimed_at in starts and START_MS not in starts


def test_max_leased_says_when_the_first_lease_runs_out(store):
    settings = store.settings.put(QueueSettings("q", updated_at=START_MS, max_leased=2))
    store.messages.offer_many("q", [Offer(f"k{i}", b"1", START_MS) for i in range(4)], START_MS)
    store.leases.poll("q", 1, str(uuid.uuid4()), START_MS + 5_000, START_MS, settings)
    store.leases.poll("q", 1, str(uuid.uuid4()), START_MS + 3_000, START_MS, settings)
    held = _poll(store, settings, START_MS + 1)
    assert (held.deliveries, held.held_back_by, held.room_at) == (
        [],
        Limit.MAX_LEASED,
        START_MS + 3_000,
    )


def test_a_claim_reads_the_limits_as_stored_now(store):
    # A replica whose settings are older than a change still claims by the stored ones.
    cached = store.settings.put(QueueSettings("q", updated_at=START_MS, max_leased=5))
    store.settings.put(QueueSettings("q", updated_at=START_MS, max_leased=1))
    store.messages.offer_many("q", [Offer(f"k{i}", b"1", START_MS) for i in range(4)], START_MS)
    assert len(_poll(store, cached, START_MS).deliveries) == 1


# -- a turn that cannot be had ----------------------------------------------------------


@contextmanager
def settings_row_locked(url: str, queue: str) -> Iterator[None]:
    """Another session holds `queue`'s settings row FOR UPDATE (on SQLite, the database's
    write lock) until the block ends, as a claim stuck in its turn would."""
    name = database_name(url)
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as connection:
            connection.exec_driver_sql("BEGIN IMMEDIATE" if name == "sqlite" else "BEGIN")
            if name != "sqlite":
                quote = '"' if name == "postgresql" else "`"
                connection.execute(
                    text(
                        f"SELECT {quote}maxLeased{quote} FROM queue_settings WHERE queue = :q FOR UPDATE"
                    ),
                    {"q": queue},
                )
            try:
                yield
            finally:
                connection.exec_driver_sql("ROLLBACK")
    finally:
        engine.dispose()


def test_a_claim_or_an_extend_that_cannot_have_its_turn_answers_503_and_changes_nothing(
    database,
):
    with bounded_client(database, lock_timeout=SHORT, statement_timeout=LONG) as client:
        configure(client, max_leased=2)
        offer(client, 2)
        held = poll(client, "q", lease=60)
        with settings_row_locked(database.url, "q"):
            for request in (
                lambda: client.post("/v1/queues/q/poll", json={"max": 1}),
                lambda: extend(client, held["lock_id"]),
            ):
                started = time.monotonic()
                answer = request()
                assert answer.status_code == 503, answer.text
                assert answer.headers["content-type"] == "application/problem+json"
                assert time.monotonic() - started <= SHORT + MARGIN
        assert client.get("/v1/queues/q").json()["leased"] == 1
        assert keys_of(poll(client, "q", lease=60)) == ["k01"]  # the turn is free again


# -- push -----------------------------------------------------------------------------


def test_push_obeys_max_leased(clean_database, clock):
    with (
        running_endpoint() as endpoint,
        service_for(clean_database, clock, endpoint.prefix) as (service),
    ):
        endpoint.answer = lambda received: Answer(hold=True)
        service.configure(
            max_leased=2, push={"url": endpoint.url(), "timeout": 30, "concurrency": 5}
        )
        offer(service.client, 6)
        endpoint.wait_until(lambda e: e.in_flight == 2)
        stats = service.client.get("/v1/queues/q").json()
        assert (stats["leased"], stats["ready"]) == (2, 4)
        leased = [row for row in stored_rows(clean_database.url) if row["lockUuid"] is not None]
        assert len(leased) == 2
        assert poll(service.client, "q") == EMPTY_POLL  # a poller gets no room either
        endpoint.release.set()
        service.settled.wait_for(6)
        assert endpoint.most_in_flight == 2
        keys = {unquote(request.headers["hourglass-key"]) for request in endpoint.requests}
        assert keys == {f"k{index:02d}" for index in range(6)}


def test_push_obeys_the_rate(clean_database, clock):
    with (
        running_endpoint() as endpoint,
        service_for(clean_database, clock, endpoint.prefix) as (service),
    ):
        # The pusher's claims that the rate cut short, as they happen.
        queue_service = service.client.app.state.service
        counted, held_back = queue_service.events.held_back, threading.Event()

        def held(queue: str, limit: Limit) -> None:
            counted(queue, limit)
            if limit is Limit.RATE:
                held_back.set()

        queue_service.events.held_back = held
        service.configure(
            rate={"limit": 2, "period": 10},
            push={"url": endpoint.url(), "timeout": 30, "concurrency": 5},
        )
        offer(service.client, 5)
        service.settled.wait_for(2)
        assert held_back.wait(10)  # the pusher asks for more, and the window has no room
        assert len(endpoint.requests) == 2
        assert service.client.get("/v1/queues/q").json()["ready"] == 3
        held_back.clear()
        clock.advance(10)  # the first two leave the window: two more begin
        keys = [key for _, key, _ in service.settled.wait_for(4)]
        assert held_back.wait(10)
        assert len(endpoint.requests) == 4
        assert sorted(keys) == ["k00", "k01", "k02", "k03"]
