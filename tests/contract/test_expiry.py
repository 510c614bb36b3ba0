"""Expiry (docs/guide/flow-control.md#expiry), on every database: `expires_at` or `ttl` on every
way in, never delivered once past it (before any sweep), swept to the dead-letter queue
(`"expired": true`) when the queue has one, else removed, recorded as `expired` either
way, leased or not; a dead letter does not expire. Sweeps are run by hand here, the fake
clock moved; two replicas sweeping on their own: tests/concurrency/test_expiry_replicas.py."""

from __future__ import annotations

import uuid

import pytest

from app.domain.messages import Offer
from tests.conftest import START_MS
from tests.support.helpers import at, history_rows, keys_of, poll, put, stored_rows

pytestmark = pytest.mark.usefixtures("clock", "swept_by_hand")


@pytest.fixture
def swept_by_hand(client) -> None:
    """The app's own sweeper stopped: only the test's sweeps run, and count."""
    client.portal.call(client.app.state.expiry_sweeper.stop)


def sweep(client) -> int:
    """The expiry sweep, now (every replica also runs it by itself, every 0.25 s)."""
    return client.portal.call(client.app.state.service.upkeep.expire, 500)


def configure(client, queue: str = "q", **settings) -> None:
    response = client.put(f"/v1/queues/{queue}/settings", json=settings)
    assert response.status_code == 200, response.text


def offered(client, key: str, queue: str = "q", **fields) -> None:
    response = put(client, queue, key, key, **fields)
    assert response.status_code in (200, 201), response.text


def message(client, key: str, queue: str = "q") -> dict:
    response = client.get(f"/v1/queues/{queue}/messages/{key}")
    assert response.status_code == 200, response.text
    return response.json()


def test_every_way_in_takes_an_expiry_and_the_message_shows_it(client):
    offered(client, "absolute", expires_at=at(START_MS + 60_000))
    offered(client, "relative", scheduled_at=at(START_MS + 5_000), ttl=30)
    offered(client, "none")
    assert message(client, "absolute")["expires_at"] == at(START_MS + 60_000)
    assert message(client, "relative")["expires_at"] == at(START_MS + 35_000)  # after due
    assert (message(client, "none")["expires_at"], message(client, "none")["expired"]) == (
        None,
        False,
    )
    created = client.post("/v1/queues/q/messages", json={"payload": 1, "delay": 2, "ttl": 3})
    assert message(client, created.json()["key"])["expires_at"] == at(START_MS + 5_000)
    updated = client.post("/v1/queues/q/messages/none", json={"payload": 1, "ttl": 1.5})
    assert updated.status_code == 200, updated.text
    assert message(client, "none")["expires_at"] == at(START_MS + 1_500)
    batch = {"messages": [{"key": "b1", "payload": 1, "ttl": 10}, {"key": "b2", "payload": 2}]}
    assert client.post("/v1/queues/q/batch", json=batch).status_code == 200
    assert message(client, "b1")["expires_at"] == at(START_MS + 10_000)
    assert message(client, "b2")["expires_at"] is None
    polled = poll(client, "q", max=10)
    shown = {each["key"]: each["expires_at"] for each in polled["messages"]}
    assert shown["b1"] == at(START_MS + 10_000) and shown["b2"] is None


@pytest.mark.parametrize(
    "fields",
    [
        {"ttl": 5, "expires_at": at(START_MS + 9_000)},
        {"ttl": 0},
        {"ttl": -1},
        {"ttl": "5"},
        {"expires_at": "tomorrow"},
    ],
)
def test_a_bad_expiry_is_a_422_that_writes_nothing(client, database, fields):
    response = put(client, "q", "k", 1, **fields)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert stored_rows(database.url) == []


def test_a_re_offer_with_the_same_expiry_is_ignored_and_a_changed_or_dropped_one_updates(
    client,
):
    fields = {"scheduled_at": at(START_MS), "expires_at": at(START_MS + 9_000)}
    assert put(client, "q", "k", 1, **fields).status_code == 201
    assert put(client, "q", "k", 1, **fields).json()["outcome"] == "ignored"
    changed = {**fields, "expires_at": at(START_MS + 8_000)}
    assert put(client, "q", "k", 1, **changed).json()["outcome"] == "updated"
    assert put(client, "q", "k", 1, scheduled_at=at(START_MS)).json()["outcome"] == "updated"
    assert message(client, "k")["expires_at"] is None
    batch = {"messages": [{"key": "k", "payload": 1, "scheduled_at": at(START_MS), "ttl": 9}]}
    assert client.post("/v1/queues/q/batch", json=batch).json()["updated"] == 1
    assert client.post("/v1/queues/q/batch", json=batch).json()["ignored"] == 1


def test_past_its_expiry_a_message_is_never_delivered_even_before_a_sweep(client, clock):
    offered(client, "k", ttl=10)
    clock.advance(9.999)
    polled = poll(client, "q", lease=1)
    assert keys_of(polled) == ["k"]
    clock.advance(1)  # the lease ran out, and the message expired
    assert poll(client, "q")["messages"] == []
    offered(client, "born-expired", expires_at=at(START_MS))  # before its due time
    assert poll(client, "q")["messages"] == []


def test_without_a_dead_letter_queue_it_is_removed_and_recorded_as_expired(client, clock, database):
    offered(client, "soon", ttl=1)
    offered(client, "later", ttl=5)
    offered(client, "never")
    assert sweep(client) == 0
    clock.advance(1)
    assert sweep(client) == 1
    assert [row["pKey"] for row in stored_rows(database.url)] == ["later", "never"]
    (row,) = history_rows(database.url)
    assert (row["key"], row["outcome"], row["finishedAt"]) == ("soon", "expired", START_MS + 1_000)
    listed = client.get("/v1/queues/q/history", params={"outcome": "expired"}).json()
    assert [entry["key"] for entry in listed["entries"]] == ["soon"]
    metrics = client.get("/metrics").text
    assert 'hourglass_messages_expired_total{queue="q"} 1.0' in metrics


def test_with_a_dead_letter_queue_it_moves_there_marked_expired_and_stays(client, clock, database):
    configure(client, max_deliveries=3)
    offered(client, "k", ttl=2, priority=4)
    clock.advance(2)
    assert sweep(client) == 1
    dead = message(client, "k", "q.dead")
    assert (dead["expired"], dead["dead_lettered_from"], dead["expires_at"]) == (True, "q", None)
    assert [row["outcome"] for row in history_rows(database.url)] == ["expired"]
    clock.advance(3600)  # a dead letter does not expire
    assert sweep(client) == 0
    assert message(client, "k", "q.dead")["state"] == "ready"
    # Redriven, it is a new message: not expired, no expiry.
    redriven = client.post("/v1/queues/q.dead/redrive", json={})
    assert redriven.status_code == 200, redriven.text
    back = message(client, "k")
    assert (back["expired"], back["expires_at"]) == (False, None)


def test_a_named_dead_letter_queue_takes_expired_messages_too(client, clock):
    configure(client, dead_letter_queue="graveyard")
    offered(client, "k", ttl=1)
    clock.advance(1)
    sweep(client)
    assert message(client, "k", "graveyard")["expired"] is True


def test_a_leased_message_expires_its_holder_finds_it_gone_and_it_never_comes_back(
    client, clock, database
):
    offered(client, "a", ttl=5)
    offered(client, "b", ttl=5)
    polled = poll(client, "q", max=2, lease=60)
    assert sorted(keys_of(polled)) == ["a", "b"]
    clock.advance(5)
    assert sweep(client) == 2
    lock = polled["lock_id"]
    acked = client.post(f"/v1/queues/q/locks/{lock}/ack", json={"keys": ["a"]})
    assert acked.status_code == 200 and acked.json()["missing"] == ["a"], acked.text
    extended = client.patch(f"/v1/queues/q/locks/{lock}", json={"lease": 30})
    assert extended.status_code == 404
    clock.advance(120)
    assert poll(client, "q", max=10)["messages"] == []
    assert stored_rows(database.url) == []
    assert sorted(row["outcome"] for row in history_rows(database.url)) == ["expired"] * 2


def test_an_expired_message_frees_its_group_s_place(client, clock):
    offered(client, "first", group="g", ttl=5)
    offered(client, "second", group="g")
    polled = poll(client, "q", max=10, lease=60)
    assert keys_of(polled) == ["first"]
    clock.advance(5)
    sweep(client)
    client.portal.call(client.app.state.service.keeper.run_pass)
    assert keys_of(poll(client, "q", max=10)) == ["second"]


def test_a_sweep_takes_every_queue_s_expired_messages_in_batches(client, clock, database):
    for queue in ("q", "r"):
        batch = [{"key": f"k{index}", "payload": index, "ttl": 1} for index in range(600)]
        assert client.post(f"/v1/queues/{queue}/batch", json={"messages": batch}).status_code == 200
    clock.advance(1)
    assert sweep(client) == 1_200
    assert stored_rows(database.url) == []


def test_a_ttl_that_reaches_past_year_9999_expires_at_its_last_instant(client):
    # Due late in 9999, a ttl of up to a hundred years would expire at no time that prints.
    offered(client, "late", scheduled_at="9999-12-31T00:00:00Z", ttl=30 * 86_400)
    assert message(client, "late")["expires_at"] == "9999-12-31T23:59:59.999Z"
    listed = client.get("/v1/queues/q/messages").json()["messages"]
    assert [each["expires_at"] for each in listed] == ["9999-12-31T23:59:59.999Z"]


def test_a_claim_judges_expiry_by_the_time_it_runs_not_the_time_the_poll_began(store):
    # The poll read the time (START_MS) before it waited for a connection; it claims two
    # seconds later, past the message's expiry: nothing is delivered.
    store.messages.offer_many(
        "q", [Offer("k", b"1", START_MS - 1_000, expires_at=START_MS + 1_000)], START_MS
    )
    claim = store.leases.poll(
        "q", 5, str(uuid.uuid4()), START_MS + 60_000, START_MS, clock=lambda: START_MS + 2_000
    )
    assert claim.deliveries == []
    leased = store.leases.poll(
        "q", 5, str(uuid.uuid4()), START_MS + 60_000, START_MS, clock=lambda: START_MS + 999
    )
    assert leased.lease_until == START_MS + 60_999  # runs from when it claimed


def test_a_waiting_poll_that_finds_only_expired_messages_sweeps_them_and_waits(
    client, clock, database
):
    # With the app's sweeper stopped, the poll's own look finds the message due but not
    # to be delivered: it sweeps (rather than look again every few milliseconds until
    # the sweeper comes), then waits out its wait with nothing due.
    offered(client, "k", ttl=1)
    clock.advance(1)
    assert poll(client, "q", wait=0.3)["messages"] == []
    assert [row["outcome"] for row in history_rows(database.url)] == ["expired"]


def test_an_expired_message_whose_dead_letter_key_a_worker_holds_is_removed(
    client, clock, database
):
    configure(client, max_deliveries=3)
    offered(client, "k", "q.dead")
    assert keys_of(poll(client, "q.dead", lease=600)) == ["k"]  # a worker holds q.dead/k
    offered(client, "k", ttl=1)
    clock.advance(1)
    assert sweep(client) == 1
    assert client.get("/v1/queues/q/messages/k").status_code == 404
    assert message(client, "k", "q.dead")["state"] == "leased"  # its holder keeps it
    assert [row["outcome"] for row in history_rows(database.url)] == ["expired"]
