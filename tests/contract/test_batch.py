"""Batch offers: input order, sequence semantics for repeated keys, all-or-nothing validation."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.domain.messages import Offer, Outcome
from tests.conftest import START_MS
from tests.support.helpers import at, keys_of, poll, put, stored_rows

# Every test here runs through both ways a batch offer inserts (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("batch_insert_path")


def _batch(client, queue: str, messages: list[dict], **fields):
    return client.post(f"/v1/queues/{queue}/batch", json={"messages": messages, **fields})


def test_batch_reports_outcomes_in_input_order(client):
    put(client, "q", "exists-same", "s", delay=0)
    put(client, "q", "exists-other", "o", delay=0)
    response = _batch(
        client,
        "q",
        [
            {"key": "new-1", "payload": 1},
            {"key": "exists-same", "payload": "s", "delay": 0},
            {"key": "exists-other", "payload": "changed"},
            {"key": "new-2", "payload": 2, "delay": 30},
        ],
    )
    assert response.status_code == 200
    assert response.json() == {
        "results": [
            {"key": "new-1", "outcome": "created"},
            {"key": "exists-same", "outcome": "ignored"},
            {"key": "exists-other", "outcome": "updated"},
            {"key": "new-2", "outcome": "created"},
        ],
        "created": 2,
        "updated": 1,
        "ignored": 1,
    }
    assert client.get("/v1/queues/q/messages/exists-other").json()["payload"] == "changed"
    assert client.get("/v1/queues/q/messages/new-2").json()["scheduled_at"] == at(START_MS + 30_000)


def test_repeated_keys_behave_as_offered_in_sequence(client):
    response = _batch(
        client,
        "q",
        [
            {"key": "k", "payload": 1},
            {"key": "k", "payload": 2},
            {"key": "k", "payload": 2},
            {"key": "k", "payload": 3, "if_exists": "ignore"},
            {"key": "i", "payload": 1, "if_exists": "ignore"},
            {"key": "i", "payload": 2, "if_exists": "ignore"},
            {"key": "i", "payload": 3},
        ],
    )
    outcomes = [result["outcome"] for result in response.json()["results"]]
    assert outcomes == ["created", "updated", "ignored", "ignored", "created", "ignored", "updated"]
    assert client.get("/v1/queues/q/messages/k").json()["payload"] == 2
    assert client.get("/v1/queues/q/messages/i").json()["payload"] == 3


def test_batch_if_exists_default_applies_to_items_without_their_own(client):
    put(client, "q", "a", "old")
    put(client, "q", "b", "old")
    response = _batch(
        client,
        "q",
        [{"key": "a", "payload": "new"}, {"key": "b", "payload": "new", "if_exists": "update"}],
        if_exists="ignore",
    )
    assert [r["outcome"] for r in response.json()["results"]] == ["ignored", "updated"]


def test_a_full_batch_of_1000_crosses_insert_chunks(client, clean_database):
    messages = [{"key": f"k{index:04d}", "payload": {"i": index}} for index in range(1000)]
    put(client, "q", "k0500", {"i": 500})
    response = _batch(client, "q", messages)
    assert response.status_code == 200
    body = response.json()
    assert (body["created"], body["updated"], body["ignored"]) == (999, 0, 1)
    assert [result["key"] for result in body["results"]] == [m["key"] for m in messages]
    assert len(stored_rows(clean_database.url)) == 1000


def test_batch_over_1000_is_422_and_writes_nothing(client, clean_database):
    messages = [{"key": f"k{index}", "payload": index} for index in range(1001)]
    assert _batch(client, "q", messages).status_code == 422
    assert stored_rows(clean_database.url) == []


def test_empty_batch_is_422(client):
    assert _batch(client, "q", []).status_code == 422


def test_one_invalid_item_rejects_the_whole_batch(client, clean_database):
    messages = [{"key": f"k{index}", "payload": index} for index in range(10)]
    messages.append({"key": "bad\u0007key", "payload": 1})
    response = _batch(client, "q", messages)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"][:3] == ["body", "messages", 10]
    assert _batch(client, "q", [{"key": "x", "payload": 1, "delay": -5}]).status_code == 422
    assert stored_rows(clean_database.url) == []


def test_one_oversized_payload_rejects_the_whole_batch(clean_database, clock):
    from fastapi.testclient import TestClient

    from app.main import create_app

    with TestClient(
        create_app(clean_database.settings(max_payload_bytes=50), clock=clock)
    ) as client:
        messages = [{"key": f"k{index}", "payload": index} for index in range(10)]
        messages.append({"key": "big", "payload": "x" * 60})
        response = _batch(client, "q", messages)
        assert response.status_code == 413
        assert response.headers["content-type"] == "application/problem+json"
    assert stored_rows(clean_database.url) == []


def test_batch_messages_come_due_at_their_own_times(client, clock):
    _batch(
        client, "q", [{"key": f"k{index}", "payload": index, "delay": index} for index in range(5)]
    )
    assert keys_of(poll(client, "q", max=10)) == ["k0"]
    clock.advance(3)
    assert keys_of(poll(client, "q", max=10)) == ["k1", "k2", "k3"]


def test_offering_stored_messages_again_reads_them_back_in_chunks(store):
    """A re-run of an import: the unchanged keys are ignored after one read per chunk,
    without the single offer's locked read and commit per key; changed ones update."""
    offers = [Offer(f"k{index:04d}", b'{"i":%d}' % index, START_MS) for index in range(1000)]
    assert set(store.messages.offer_many("q", offers, START_MS)) == {Outcome.CREATED}
    statements = []
    store.listen_statements(lambda _statement: statements.append(1))

    again = store.messages.offer_many("q", offers, START_MS + 1)
    assert set(again) == {Outcome.IGNORED}
    assert len(statements) <= 20  # a few per chunk of 200 keys; one per key would be 2000+

    changed = [*offers[:990], *(replace(offer, payload=b'"new"') for offer in offers[990:])]
    outcomes = store.messages.offer_many("q", changed, START_MS + 2)
    assert outcomes == [Outcome.IGNORED] * 990 + [Outcome.UPDATED] * 10
    assert store.messages.get("q", "k0999").payload == b'"new"'
    moved = replace(offers[0], scheduled_at=START_MS + 5)
    assert store.messages.offer_many("q", [moved], START_MS + 3) == [Outcome.UPDATED]
