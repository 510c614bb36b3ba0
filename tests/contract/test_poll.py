"""Polling and leases, with a fake clock: visibility, order, expiry, redelivery, locks."""

from __future__ import annotations

import random

from tests.conftest import START_MS
from tests.support.helpers import at, keys_of, poll, put


def test_poll_of_an_empty_queue(client):
    assert poll(client, "q") == {"lock_id": None, "messages": []}


def test_poll_body_is_optional(client):
    put(client, "q", "k", 1)
    response = client.post("/v1/queues/q/poll")
    assert response.status_code == 200
    assert keys_of(response.json()) == ["k"]


def test_a_future_message_is_invisible_until_exactly_due(client, clock):
    put(client, "q", "k", "hello", delay=10)
    clock.advance(9.999)
    assert poll(client, "q")["messages"] == []
    clock.advance(0.001)
    polled = poll(client, "q", lease=30)
    assert polled["lock_id"]
    (message,) = polled["messages"]
    assert message == {
        "queue": "q",
        "key": "k",
        "payload": "hello",
        "scheduled_at": at(START_MS + 40_000),
        "scheduled_at_initially": at(START_MS + 10_000),
        "created_at": at(START_MS),
        "state": "leased",
        "deliveries": 1,
        "dead_lettered_from": None,
        "priority": 0,
        "group": None,
        "expires_at": None,
        "expired": False,
        "trace": None,
        "delivery": "first",
        "lease_expires_at": at(START_MS + 40_000),
    }


def test_messages_come_out_in_scheduled_order(client, clock):
    delays = list(range(50))
    random.Random(7).shuffle(delays)
    for delay in delays:
        put(client, "q", f"k{delay:02d}", delay, delay=delay)
    clock.advance(100)
    first = keys_of(poll(client, "q", max=20))
    one_by_one = [keys_of(poll(client, "q"))[0] for _ in range(10)]
    rest = keys_of(poll(client, "q", max=1000))
    assert first + one_by_one + rest == [f"k{delay:02d}" for delay in range(50)]


def test_max_bounds_the_messages_per_poll(client):
    for index in range(5):
        put(client, "q", f"k{index}", index)
    assert len(poll(client, "q", max=3)["messages"]) == 3
    assert len(poll(client, "q", max=3)["messages"]) == 2
    assert poll(client, "q", max=3)["messages"] == []


def test_one_lock_covers_every_message_of_a_poll(client):
    for index in range(3):
        put(client, "q", f"k{index}", index)
    lock = poll(client, "q", max=10)["lock_id"]
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
    assert client.get("/v1/queues/q").json()["messages"] == 0


def test_default_lease_comes_from_settings(clean_database, clock):
    from fastapi.testclient import TestClient

    from app.main import create_app

    with TestClient(create_app(clean_database.settings(default_lease=42), clock=clock)) as client:
        put(client, "q", "k", 1)
        assert poll(client, "q")["messages"][0]["lease_expires_at"] == at(START_MS + 42_000)


def test_an_expired_lease_is_delivered_again_as_a_redelivery(client, clock):
    put(client, "q", "k", 1)
    first = poll(client, "q", lease=30)
    assert first["messages"][0]["delivery"] == "first"
    clock.advance(29.999)
    assert poll(client, "q")["messages"] == []
    assert client.get("/v1/queues/q/messages/k").json()["state"] == "leased"
    clock.advance(0.001)
    assert client.get("/v1/queues/q/messages/k").json()["state"] == "ready"
    second = poll(client, "q", lease=30)
    assert second["lock_id"] != first["lock_id"]
    assert second["messages"][0]["delivery"] == "redelivery"
    # The first worker's late ack finds nothing and deletes nothing.
    assert client.delete(f"/v1/queues/q/locks/{first['lock_id']}").status_code == 404
    assert client.get("/v1/queues/q/messages/k").status_code == 200
    assert client.delete(f"/v1/queues/q/locks/{second['lock_id']}").status_code == 204
    assert client.get("/v1/queues/q/messages/k").status_code == 404


def test_an_expired_lease_not_yet_taken_still_belongs_to_its_holder(client, clock):
    put(client, "q", "k", 1)
    lock = poll(client, "q", lease=30)["lock_id"]
    clock.advance(60)
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
    assert poll(client, "q")["messages"] == []


def test_redelivery_is_per_message_within_one_poll(client, clock):
    put(client, "q", "old", 1)
    poll(client, "q", lease=10)
    put(client, "q", "fresh", 2, delay=5)
    clock.advance(10)
    polled = poll(client, "q", max=10)
    assert [(m["key"], m["delivery"]) for m in polled["messages"]] == [
        ("fresh", "first"),
        ("old", "redelivery"),
    ]


def test_updating_a_leased_message_takes_it_from_its_holder(client, clock):
    put(client, "q", "k", "v1")
    lock = poll(client, "q", lease=300)["lock_id"]
    assert put(client, "q", "k", "v2", delay=5).json()["outcome"] == "updated"
    assert client.get("/v1/queues/q/messages/k").json()["state"] == "scheduled"
    # The old holder's ack no longer deletes the new message.
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 404
    assert client.get("/v1/queues/q/messages/k").json()["payload"] == "v2"
    assert poll(client, "q")["messages"] == []
    clock.advance(5)
    (message,) = poll(client, "q")["messages"]
    assert (message["payload"], message["delivery"]) == ("v2", "first")


def test_an_ignored_reoffer_leaves_the_lease_alone(client):
    put(client, "q", "k", "v1", scheduled_at=at(START_MS))
    lock = poll(client, "q", lease=300)["lock_id"]
    assert put(client, "q", "k", "v1", scheduled_at=at(START_MS)).json()["outcome"] == "ignored"
    assert put(client, "q", "k", "v9", if_exists="ignore").json()["outcome"] == "ignored"
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204


def test_extend_moves_the_lease_end(client, clock):
    put(client, "q", "k", 1)
    lock = poll(client, "q", lease=10)["lock_id"]
    clock.advance(8)
    response = client.patch(f"/v1/queues/q/locks/{lock}", json={"lease": 60})
    assert response.status_code == 200
    assert response.json() == {"lease_expires_at": at(START_MS + 68_000)}
    clock.advance(59.999)
    assert poll(client, "q")["messages"] == []
    clock.advance(0.001)
    assert poll(client, "q")["messages"][0]["delivery"] == "redelivery"
    assert client.patch(f"/v1/queues/q/locks/{lock}", json={"lease": 60}).status_code == 404


def test_release_gives_the_message_back_as_a_redelivery(client, clock):
    put(client, "q", "k", 1)
    lock = poll(client, "q", lease=300)["lock_id"]
    response = client.post(f"/v1/queues/q/locks/{lock}/release")
    assert response.status_code == 204
    (message,) = poll(client, "q")["messages"]
    assert message["delivery"] == "redelivery"
    assert client.post(f"/v1/queues/q/locks/{lock}/release").status_code == 404
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 404


def test_release_with_a_delay(client, clock):
    put(client, "q", "k", 1)
    lock = poll(client, "q")["lock_id"]
    clock.advance(1)
    assert client.post(f"/v1/queues/q/locks/{lock}/release", json={"delay": 30}).status_code == 204
    message = client.get("/v1/queues/q/messages/k").json()
    assert (message["state"], message["scheduled_at"]) == ("scheduled", at(START_MS + 31_000))
    clock.advance(29.999)
    assert poll(client, "q")["messages"] == []
    clock.advance(0.001)
    assert poll(client, "q")["messages"][0]["delivery"] == "redelivery"


def test_locks_belong_to_their_queue(client):
    put(client, "a", "k", 1)
    lock = poll(client, "a")["lock_id"]
    assert client.delete(f"/v1/queues/b/locks/{lock}").status_code == 404
    assert client.patch(f"/v1/queues/b/locks/{lock}", json={"lease": 5}).status_code == 404
    assert client.post(f"/v1/queues/b/locks/{lock}/release").status_code == 404
    assert client.delete(f"/v1/queues/a/locks/{lock}").status_code == 204


def test_unknown_locks_are_404(client):
    assert client.delete("/v1/queues/q/locks/not-a-lock").status_code == 404
    assert (
        client.delete("/v1/queues/q/locks/00000000-0000-4000-8000-000000000000").status_code == 404
    )


def test_queues_are_independent(client):
    put(client, "a", "k1", 1)
    put(client, "b", "k2", 2)
    assert keys_of(poll(client, "a", max=10)) == ["k1"]
    assert keys_of(poll(client, "b", max=10)) == ["k2"]
