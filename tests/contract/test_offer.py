"""Offers over HTTP: create, update, ignore, update-only, generated keys, read and delete."""

from __future__ import annotations

import pytest

from tests.conftest import START_MS
from tests.support.helpers import at, poll, put, stored_rows


def test_put_creates_then_updates_then_ignores(client):
    created = put(client, "q", "k", {"n": 1}, delay=60)
    assert created.status_code == 201
    assert created.json() == {
        "queue": "q",
        "key": "k",
        "outcome": "created",
        "scheduled_at": at(START_MS + 60_000),
    }

    updated = put(client, "q", "k", {"n": 2}, delay=60)
    assert updated.status_code == 200
    assert updated.json()["outcome"] == "updated"

    same = put(client, "q", "k", {"n": 2}, scheduled_at=at(START_MS + 60_000))
    assert same.status_code == 200
    assert same.json()["outcome"] == "ignored"

    moved = put(client, "q", "k", {"n": 2}, delay=61)
    assert moved.json()["outcome"] == "updated"
    assert client.get("/v1/queues/q/messages/k").json()["scheduled_at"] == at(START_MS + 61_000)


def test_put_with_if_exists_ignore_keeps_the_stored_message(client):
    put(client, "q", "k", "first", delay=5)
    response = put(client, "q", "k", "second", delay=50, if_exists="ignore")
    assert response.status_code == 200
    # The answer tells when the message that stays is due, not what was asked.
    assert response.json() == {
        "queue": "q",
        "key": "k",
        "outcome": "ignored",
        "scheduled_at": at(START_MS + 5_000),
    }
    message = client.get("/v1/queues/q/messages/k").json()
    assert message["payload"] == "first"
    assert message["scheduled_at"] == at(START_MS + 5_000)


def test_put_without_a_time_is_due_now(client):
    assert put(client, "q", "k", 1).json()["scheduled_at"] == at(START_MS)
    assert client.get("/v1/queues/q/messages/k").json()["state"] == "ready"


def test_scheduled_at_accepts_offsets_and_the_past(client):
    response = put(client, "q", "k", 1, scheduled_at="2026-11-26T11:00:00.250+02:00")
    assert response.json()["scheduled_at"] == "2026-11-26T09:00:00.250Z"
    past = put(client, "q", "old", 1, scheduled_at="2001-01-01T00:00:00Z")
    assert past.status_code == 201
    assert client.get("/v1/queues/q/messages/old").json()["state"] == "ready"


def test_message_read_shows_every_field(client):
    put(client, "q", "a/b/c", {"z": [1, 2.5, None, True], "é": "ü"}, delay=10)
    response = client.get("/v1/queues/q/messages/a/b/c")
    assert response.status_code == 200
    assert response.json() == {
        "queue": "q",
        "key": "a/b/c",
        "payload": {"z": [1, 2.5, None, True], "é": "ü"},
        "scheduled_at": at(START_MS + 10_000),
        "scheduled_at_initially": at(START_MS + 10_000),
        "created_at": at(START_MS),
        "state": "scheduled",
        "deliveries": 0,
        "dead_lettered_from": None,
        "priority": 0,
        "group": None,
        "expires_at": None,
        "expired": False,
        "trace": None,
    }
    assert "lock" not in response.text


def test_payload_is_stored_as_compact_utf8_json_of_the_value_sent(client, clean_database):
    client.put(
        "/v1/queues/q/messages/k",
        content='{"payload": {"b" : 1,  "a": ["x", "é"]}}',
        headers={"content-type": "application/json"},
    )
    (row,) = stored_rows(clean_database.url)
    assert row["payload"] == '{"b":1,"a":["x","é"]}'.encode()
    assert (row["pKey"], row["pKind"], row["lockUuid"]) == ("k", "q", None)
    assert row["scheduledAt"] == row["scheduledAtInitially"] == row["createdAt"] == START_MS


def test_update_of_the_same_payload_with_another_key_order_is_an_update(client):
    put(client, "q", "k", {"a": 1, "b": 2})
    assert put(client, "q", "k", {"b": 2, "a": 1}).json()["outcome"] == "updated"


def test_post_updates_only_existing_messages(client, clean_database):
    missing = client.post("/v1/queues/q/messages/k", json={"payload": 1})
    assert missing.status_code == 404
    assert missing.headers["content-type"] == "application/problem+json"
    assert stored_rows(clean_database.url) == []

    put(client, "q", "k", 1, delay=5)
    updated = client.post("/v1/queues/q/messages/k", json={"payload": 2, "delay": 7})
    assert updated.status_code == 200
    assert updated.json() == {
        "queue": "q",
        "key": "k",
        "outcome": "updated",
        "scheduled_at": at(START_MS + 7_000),
    }
    ignored = client.post("/v1/queues/q/messages/k", json={"payload": 2, "delay": 7})
    assert ignored.json()["outcome"] == "ignored"


def test_post_update_only_refuses_if_exists(client):
    put(client, "q", "k", 1)
    response = client.post("/v1/queues/q/messages/k", json={"payload": 1, "if_exists": "ignore"})
    assert response.status_code == 422


def test_post_without_key_generates_one(client):
    response = client.post(
        "/v1/queues/q/messages", json={"payload": {"hello": "world"}, "delay": 3}
    )
    assert response.status_code == 201
    body = response.json()
    assert body["outcome"] == "created"
    assert body["scheduled_at"] == at(START_MS + 3_000)
    assert response.headers["location"] == f"/v1/queues/q/messages/{body['key']}"
    fetched = client.get(response.headers["location"])
    assert fetched.json()["payload"] == {"hello": "world"}
    other = client.post("/v1/queues/q/messages", json={"payload": 1}).json()["key"]
    assert other != body["key"]


def test_get_and_delete_answer_404_for_unknown_keys(client):
    assert client.get("/v1/queues/q/messages/nope").status_code == 404
    assert client.delete("/v1/queues/q/messages/nope").status_code == 404


def test_delete_removes_the_message_even_when_leased(client):
    put(client, "q", "k", 1)
    assert poll(client, "q")["lock_id"]
    response = client.delete("/v1/queues/q/messages/k")
    assert response.status_code == 204
    assert response.content == b""
    assert client.get("/v1/queues/q/messages/k").status_code == 404
    assert client.delete("/v1/queues/q/messages/k").status_code == 404


def test_same_key_in_two_queues_are_two_messages(client):
    put(client, "a", "k", "in a")
    put(client, "b", "k", "in b")
    assert client.get("/v1/queues/a/messages/k").json()["payload"] == "in a"
    assert client.get("/v1/queues/b/messages/k").json()["payload"] == "in b"
    client.delete("/v1/queues/a/messages/k")
    assert client.get("/v1/queues/b/messages/k").status_code == 200


def test_keys_compare_exactly(client):
    put(client, "q", "Key", 1)
    assert put(client, "q", "key", 2).status_code == 201
    assert put(client, "q", "key ", 3).status_code == 201
    assert client.get("/v1/queues/q/messages/Key").json()["payload"] == 1


@pytest.mark.parametrize(
    "key",
    ["a" * 200, "with space", "ünïcødé/ключ/鍵", "100%25", "a%2Fb", "🙂" * 200, "trailing/"],
)
def test_valid_keys_round_trip(client, key):
    assert client.put(f"/v1/queues/q/messages/{key}", json={"payload": 1}).status_code == 201
    assert client.get(f"/v1/queues/q/messages/{key}").status_code == 200


@pytest.mark.parametrize(
    "queue",
    ["a", "A.b-c_d", "0" * 100],
)
def test_valid_queue_names(client, queue):
    assert put(client, queue, "k", 1).status_code == 201
    assert client.get(f"/v1/queues/{queue}/messages/k").json()["queue"] == queue
