"""Priorities (decision 17), on every database, with a fake clock: among due
messages a poll takes the highest priority first, then the earliest due, then the
first offered; every way in takes a priority; a changed priority is an update."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES
from app.main import create_app
from tests.conftest import START_MS
from tests.support.helpers import at, keys_of, poll, put, stored_rows


def _batch(client: TestClient, queue: str, items: list[dict], **fields) -> dict:
    response = client.post(f"/v1/queues/{queue}/batch", json={"messages": items, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def test_due_messages_come_highest_priority_first_then_earliest_due(client, clock):
    # Every priority at every one of five due times, offered in a shuffled order.
    offers = [(priority, second) for priority in range(10) for second in range(5)]
    random.Random(20).shuffle(offers)
    for priority, second in offers:
        put(client, "q", f"p{priority}-s{second}", None, delay=second, priority=priority)
    # Later: not due at the polls below, whatever their priority.
    put(client, "q", "future-9", None, delay=3600, priority=9)
    clock.advance(2)  # due: seconds 0, 1 and 2 of every priority
    first = keys_of(poll(client, "q", max=4))
    one = keys_of(poll(client, "q"))
    rest = keys_of(poll(client, "q", max=1000))
    expected = [f"p{priority}-s{second}" for priority in range(9, -1, -1) for second in range(3)]
    assert first + one + rest == expected
    clock.advance(2)  # seconds 3 and 4 come due, still below the hour-ahead message
    assert keys_of(poll(client, "q", max=1000)) == [
        f"p{priority}-s{second}" for priority in range(9, -1, -1) for second in (3, 4)
    ]
    assert poll(client, "q")["messages"] == []


def test_within_a_priority_and_a_millisecond_the_first_offered_comes_first(client):
    for key in ("c", "a", "b"):
        put(client, "q", key, None, priority=4)
    put(client, "q", "low", None, priority=3)
    assert keys_of(poll(client, "q", max=10)) == ["c", "a", "b", "low"]


def test_a_priority_9_message_offered_after_1000_due_ones_is_the_next_poll(client, clock):
    for start in range(0, 1000, 500):
        items = [{"key": f"k{n:04d}", "payload": n} for n in range(start, start + 500)]
        assert _batch(client, "q", items)["created"] == 500
    clock.advance(1)
    assert put(client, "q", "urgent", "now", priority=9).status_code == 201
    (message,) = poll(client, "q")["messages"]
    assert (message["key"], message["priority"]) == ("urgent", 9)
    assert keys_of(poll(client, "q", max=3)) == ["k0000", "k0001", "k0002"]


def test_a_higher_priority_still_waits_for_its_time(client, clock):
    put(client, "q", "later", None, delay=10, priority=9)
    put(client, "q", "now", None)
    assert keys_of(poll(client, "q", max=10)) == ["now"]
    clock.advance(10)
    assert keys_of(poll(client, "q", max=10)) == ["later"]


def test_an_expired_lease_comes_back_at_its_priority(client, clock):
    put(client, "q", "high", None, priority=8)
    assert keys_of(poll(client, "q", lease=5)) == ["high"]
    put(client, "q", "low", None, priority=1)
    clock.advance(5)
    polled = poll(client, "q", max=10)
    assert keys_of(polled) == ["high", "low"]
    assert [message["delivery"] for message in polled["messages"]] == ["redelivery", "first"]


def test_every_way_in_takes_a_priority_and_every_read_shows_it(client):
    assert put(client, "q", "put", 1, priority=5).status_code == 201
    created = client.post("/v1/queues/q/messages", json={"payload": 2, "priority": 6})
    assert created.status_code == 201
    generated = created.json()["key"]
    _batch(
        client,
        "q",
        [{"key": "batched", "payload": 3, "priority": 7}, {"key": "plain", "payload": 4}],
    )
    updated = client.post("/v1/queues/q/messages/plain", json={"payload": 4, "priority": 8})
    assert (updated.status_code, updated.json()["outcome"]) == (200, "updated")

    expected = {"put": 5, generated: 6, "batched": 7, "plain": 8}
    for key, priority in expected.items():
        assert client.get(f"/v1/queues/q/messages/{key}").json()["priority"] == priority
    listed = client.get("/v1/queues/q/messages").json()["messages"]
    assert {message["key"]: message["priority"] for message in listed} == expected
    by_prefix = client.get("/v1/queues/q/messages", params={"prefix": "batch"}).json()["messages"]
    assert [(message["key"], message["priority"]) for message in by_prefix] == [("batched", 7)]
    polled = poll(client, "q", max=10)["messages"]
    assert [(message["key"], message["priority"]) for message in polled] == [
        ("plain", 8),
        ("batched", 7),
        (generated, 6),
        ("put", 5),
    ]


def test_no_priority_means_0(client, clean_database):
    put(client, "q", "k", 1)
    assert client.get("/v1/queues/q/messages/k").json()["priority"] == 0
    assert [row["priority"] for row in stored_rows(clean_database.url)] == [0]


def test_a_changed_priority_is_an_update_and_the_same_one_is_ignored(client, clock):
    when = at(START_MS + 60_000)
    assert put(client, "q", "k", {"a": 1}, scheduled_at=when, priority=2).status_code == 201
    same = put(client, "q", "k", {"a": 1}, scheduled_at=when, priority=2)
    assert (same.status_code, same.json()["outcome"]) == (200, "ignored")
    changed = put(client, "q", "k", {"a": 1}, scheduled_at=when, priority=3)
    assert (changed.status_code, changed.json()["outcome"]) == (200, "updated")
    assert client.get("/v1/queues/q/messages/k").json()["priority"] == 3
    # Left out, the priority is 0: a change too.
    back = put(client, "q", "k", {"a": 1}, scheduled_at=when)
    assert back.json()["outcome"] == "updated"
    assert client.get("/v1/queues/q/messages/k").json()["priority"] == 0

    only = client.post("/v1/queues/q/messages/k", json={"payload": {"a": 1}, "scheduled_at": when})
    assert only.json()["outcome"] == "ignored"
    only = client.post(
        "/v1/queues/q/messages/k", json={"payload": {"a": 1}, "scheduled_at": when, "priority": 9}
    )
    assert only.json()["outcome"] == "updated"
    # if_exists=ignore keeps what is stored, priority included.
    ignored = put(client, "q", "k", 2, scheduled_at=when, priority=1, if_exists="ignore")
    assert ignored.json()["outcome"] == "ignored"
    assert client.get("/v1/queues/q/messages/k").json()["priority"] == 9


def test_a_batch_updates_a_changed_priority_and_ignores_the_same_one(client):
    when = at(START_MS + 60_000)
    items = [{"key": f"k{n}", "payload": n, "scheduled_at": when, "priority": n} for n in range(4)]
    assert _batch(client, "q", items)["created"] == 4
    again = _batch(client, "q", items)
    assert (again["created"], again["updated"], again["ignored"]) == (0, 0, 4)
    items[1] = {**items[1], "priority": 9}
    items[2] = {key: value for key, value in items[2].items() if key != "priority"}
    changed = _batch(client, "q", items)
    assert [result["outcome"] for result in changed["results"]] == [
        "ignored",
        "updated",
        "updated",
        "ignored",
    ]
    priorities = [client.get(f"/v1/queues/q/messages/k{n}").json()["priority"] for n in range(4)]
    assert priorities == [0, 9, 0, 3]


@pytest.mark.parametrize("priority", [-1, 10, 2.5, "5", True, None])
def test_a_priority_outside_0_to_9_is_422_and_nothing_is_written(client, clean_database, priority):
    body = {"payload": 1, "priority": priority}
    assert client.put("/v1/queues/q/messages/k", json=body).status_code == 422
    assert client.post("/v1/queues/q/messages", json=body).status_code == 422
    batch = {"messages": [{"key": "a", "payload": 1}, {"key": "b", **body}]}
    assert client.post("/v1/queues/q/batch", json=batch).status_code == 422
    assert stored_rows(clean_database.url) == []


def test_a_whole_number_written_with_a_fraction_is_taken(client):
    assert put(client, "q", "k", 1, priority=7.0).status_code == 201
    assert client.get("/v1/queues/q/messages/k").json()["priority"] == 7


@pytest.fixture
def bounded(clean_database, clock) -> Iterator[TestClient]:
    """A service whose polls answer at most two messages of TEXT."""
    settings = clean_database.settings(max_poll_bytes=2 * COUNTED)
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client


TEXT = "x" * 30_000
COUNTED = len(TEXT) + 2 + POLL_MESSAGE_ENVELOPE_BYTES


def test_a_poll_bounded_in_bytes_keeps_the_highest_priorities(bounded, clock):
    for index, priority in enumerate((0, 5, 0, 9)):
        put(bounded, "q", f"k{index}-p{priority}", TEXT, delay=index, priority=priority)
    clock.advance(10)
    assert keys_of(poll(bounded, "q", max=10)) == ["k3-p9", "k1-p5"]
    assert keys_of(poll(bounded, "q", max=10)) == ["k0-p0", "k2-p0"]
