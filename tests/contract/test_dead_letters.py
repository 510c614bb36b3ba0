"""Queue settings, delivery limits, dead-letter queues and redrive, on every database."""

from __future__ import annotations

import uuid

import pytest
from fastapi.testclient import TestClient

from app.domain.errors import StorageUnavailable
from app.domain.messages import Offer, QueueSettings
from app.main import create_app
from app.queue.settings import SETTINGS_CACHE_SECONDS
from tests.conftest import START_MS
from tests.support.helpers import history_rows, keys_of, poll, put, settings_rows, stored_rows

LEASE = 30


def configure(client, queue: str = "q", **fields):
    response = client.put(f"/v1/queues/{queue}/settings", json=fields)
    assert response.status_code == 200, response.text
    return response.json()


def deliver_without_acknowledging(client, clock, queue: str = "q", **fields) -> dict:
    """One poll whose lease then runs out."""
    polled = poll(client, queue, lease=LEASE, **fields)
    clock.advance(LEASE)
    return polled


def test_a_queue_without_settings_has_the_defaults(client):
    response = client.get("/v1/queues/q/settings")
    assert response.status_code == 200
    assert response.json() == {
        "queue": "q",
        "default_lease": 300.0,
        "max_deliveries": None,
        "dead_letter_queue": "q.dead",
        "retry": None,
        "push": None,
        "group_concurrency": 1,
        "max_leased": None,
        "rate": None,
        "updated_at": None,
    }


def test_settings_are_replaced_whole(client, clock):
    body = configure(client, default_lease=60, max_deliveries=3, dead_letter_queue="failed")
    assert body == {
        "queue": "q",
        "default_lease": 60.0,
        "max_deliveries": 3,
        "dead_letter_queue": "failed",
        "retry": None,
        "push": None,
        "group_concurrency": 1,
        "max_leased": None,
        "rate": None,
        "updated_at": "2026-11-26T09:00:00.000Z",
    }
    assert client.get("/v1/queues/q/settings").json() == body
    clock.advance(1)
    # What a PUT leaves out goes back to its default.
    assert configure(client, max_deliveries=5) == {
        "queue": "q",
        "default_lease": 300.0,
        "max_deliveries": 5,
        "dead_letter_queue": "q.dead",
        "retry": None,
        "push": None,
        "group_concurrency": 1,
        "max_leased": None,
        "rate": None,
        "updated_at": "2026-11-26T09:00:01.000Z",
    }


@pytest.mark.parametrize(
    "body",
    [
        {"max_deliveries": 0},
        {"max_deliveries": 1001},
        {"max_deliveries": "3"},
        {"max_deliveries": 2.5},
        {"default_lease": 0.5},
        {"default_lease": 43_201},
        {"dead_letter_queue": "not a queue"},
        {"dead_letter_queue": "q"},  # its own
        {"max_delivery": 3},
    ],
)
def test_bad_settings_are_422_and_store_nothing(client, database, body):
    response = client.put("/v1/queues/q/settings", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert settings_rows(database.url) == []


def test_a_default_dead_letter_queue_name_too_long_is_422(client, database):
    queue = "q" * 96  # "q…q.dead" would be 101 characters
    response = client.put(f"/v1/queues/{queue}/settings", json={"max_deliveries": 1})
    assert response.status_code == 422
    assert "dead_letter_queue" in response.json()["detail"]
    named = client.put(
        f"/v1/queues/{queue}/settings", json={"max_deliveries": 1, "dead_letter_queue": "dlq"}
    )
    assert named.status_code == 200
    assert [row["queue"] for row in settings_rows(database.url)] == [queue]


def test_the_queue_default_lease_applies_to_polls_that_name_none(client):
    configure(client, default_lease=60)
    put(client, "q", "a", 1)
    put(client, "q", "b", 1)
    first = poll(client, "q")
    assert first["messages"][0]["lease_expires_at"] == "2026-11-26T09:01:00.000Z"
    named = poll(client, "q", lease=10)
    assert named["messages"][0]["lease_expires_at"] == "2026-11-26T09:00:10.000Z"


def test_settings_changed_through_another_replica_apply_within_the_cache_time(
    client, clock, settings
):
    for key in ("a", "b", "c"):
        put(client, "q", key, 1)
    assert poll(client, "q")["messages"][0]["lease_expires_at"] == "2026-11-26T09:05:00.000Z"
    with TestClient(create_app(settings, clock=clock)) as replica:
        configure(replica, default_lease=60)
    clock.advance(SETTINGS_CACHE_SECONDS - 1)  # this replica still has the old ones
    assert poll(client, "q")["messages"][0]["lease_expires_at"] == "2026-11-26T09:05:04.000Z"
    clock.advance(1)
    assert poll(client, "q")["messages"][0]["lease_expires_at"] == "2026-11-26T09:01:05.000Z"


def test_every_delivery_is_counted(client, clock):
    put(client, "q", "k", 1)
    assert client.get("/v1/queues/q/messages/k").json()["deliveries"] == 0
    for expected in (1, 2, 3):
        (message,) = deliver_without_acknowledging(client, clock)["messages"]
        assert message["deliveries"] == expected
        assert message["delivery"] == ("first" if expected == 1 else "redelivery")
    assert client.get("/v1/queues/q/messages/k").json()["deliveries"] == 3


def test_a_message_past_its_last_delivery_moves_to_the_dead_letter_queue(client, clock, database):
    configure(client, max_deliveries=3)
    put(client, "q", "k", {"n": 1}, delay=5)
    clock.advance(5)
    for expected in (1, 2, 3):
        (message,) = deliver_without_acknowledging(client, clock)["messages"]
        assert message["deliveries"] == expected
    finished_at = clock.now

    # Due a fourth time: it is not delivered, it moves.
    assert poll(client, "q") == {"lock_id": None, "messages": []}
    assert client.get("/v1/queues/q/messages/k").status_code == 404
    dead = client.get("/v1/queues/q.dead/messages/k").json()
    assert dead == {
        "queue": "q.dead",
        "key": "k",
        "payload": {"n": 1},
        "scheduled_at": "2026-11-26T09:01:35.000Z",
        "scheduled_at_initially": "2026-11-26T09:01:35.000Z",
        "created_at": "2026-11-26T09:00:00.000Z",
        "state": "ready",
        "deliveries": 0,
        "dead_lettered_from": "q",
        "priority": 0,
        "group": None,
        "expires_at": None,
        "expired": False,
        "trace": None,
    }
    assert history_rows(database.url) == [
        {
            "queue": "q",
            "key": "k",
            "scheduledAt": START_MS + 5_000,
            "createdAt": START_MS,
            "firstDeliveredAt": START_MS + 5_000,
            "lastDeliveredAt": START_MS + 5_000 + 2 * LEASE * 1000,
            "deliveries": 3,
            "outcome": "dead_lettered",
            "finishedAt": finished_at,
        }
    ]
    metrics = client.get("/metrics").text
    assert 'hourglass_messages_dead_lettered_total{queue="q"} 1.0' in metrics

    # The dead-letter queue is an ordinary queue.
    stats = client.get("/v1/queues/q.dead").json()
    assert (stats["messages"], stats["ready"]) == (1, 1)
    polled = poll(client, "q.dead")
    assert polled["messages"][0]["deliveries"] == 1
    assert polled["messages"][0]["dead_lettered_from"] == "q"
    assert client.delete(f"/v1/queues/q.dead/locks/{polled['lock_id']}").status_code == 204
    assert [(row["queue"], row["outcome"]) for row in history_rows(database.url)] == [
        ("q", "dead_lettered"),
        ("q.dead", "acknowledged"),
    ]


def test_a_poll_looks_past_messages_it_dead_letters(client, clock):
    configure(client, max_deliveries=1, dead_letter_queue="failed")
    for key in ("old-1", "old-2"):
        put(client, "q", key, 1)
    deliver_without_acknowledging(client, clock, max=2)
    put(client, "q", "fresh", 1)
    assert keys_of(poll(client, "q")) == ["fresh"]
    assert client.get("/v1/queues/failed").json()["messages"] == 2


def test_a_message_acknowledged_on_its_last_delivery_is_not_dead_lettered(client, clock):
    configure(client, max_deliveries=2)
    put(client, "q", "k", 1)
    deliver_without_acknowledging(client, clock)
    last = poll(client, "q", lease=LEASE)
    assert last["messages"][0]["deliveries"] == 2
    assert client.delete(f"/v1/queues/q/locks/{last['lock_id']}").status_code == 204
    assert client.get("/v1/queues/q.dead").json()["messages"] == 0


def test_a_newer_dead_letter_replaces_one_with_the_same_key(client, clock, database):
    configure(client, max_deliveries=1)
    for payload in ("first", "second"):
        put(client, "q", "k", payload)
        deliver_without_acknowledging(client, clock)
        assert poll(client, "q")["messages"] == []
    dead = client.get("/v1/queues/q.dead/messages/k").json()
    assert dead["payload"] == "second"
    assert [(row["queue"], row["outcome"]) for row in history_rows(database.url)] == [
        ("q", "dead_lettered"),
        ("q.dead", "dropped"),  # the first dead letter, replaced
        ("q", "dead_lettered"),
    ]


def _dead_letters(client, clock, *keys: str, queue: str = "q") -> None:
    configure(client, queue, max_deliveries=1)
    for key in keys:
        put(client, queue, key, key)
    deliver_without_acknowledging(client, clock, queue, max=len(keys))
    assert poll(client, queue)["messages"] == []


def test_redrive_moves_dead_letters_back_where_they_came_from(client, clock):
    _dead_letters(client, clock, "a", "b")
    _dead_letters(client, clock, "c", queue="other")
    configure(client, "other", max_deliveries=1, dead_letter_queue="q.dead")
    response = client.post("/v1/queues/q.dead/redrive", json={})
    assert response.status_code == 200
    assert response.json() == {"moved": 2, "skipped": 0, "forbidden": 0}
    assert client.get("/v1/queues/q.dead").json()["messages"] == 0
    polled = poll(client, "q", max=10)
    assert keys_of(polled) == ["a", "b"]
    # Back as new messages: due now, counted from zero, not dead letters any more.
    assert {m["deliveries"] for m in polled["messages"]} == {1}
    assert {m["dead_lettered_from"] for m in polled["messages"]} == {None}
    assert {m["delivery"] for m in polled["messages"]} == {"first"}
    assert {m["scheduled_at_initially"] for m in polled["messages"]} == {
        "2026-11-26T09:01:00.000Z"  # now: two leases ran out
    }
    assert client.get("/v1/queues/other.dead").json()["messages"] == 1  # untouched


def test_redrive_to_another_queue_and_at_most_max(client, clock):
    _dead_letters(client, clock, "a", "b", "c")
    response = client.post("/v1/queues/q.dead/redrive", json={"to": "retry", "max": 2})
    assert response.json() == {"moved": 2, "skipped": 0, "forbidden": 0}
    assert keys_of(poll(client, "retry", max=10)) == ["a", "b"]
    assert client.get("/v1/queues/q.dead").json()["messages"] == 1


def test_redrive_leaves_what_it_cannot_move(client, clock):
    _dead_letters(client, clock, "a", "b", "held")
    put(client, "q", "a", "offered again")  # the key is taken in q now
    put(client, "q.dead", "orphan", 1)  # offered straight into the dead-letter queue
    held = poll(client, "q.dead", lease=LEASE)  # a worker holds the oldest: "a"
    assert keys_of(held) == ["a"]
    assert client.post("/v1/queues/q.dead/redrive", json={}).json() == {
        "moved": 2,  # b, held
        "skipped": 1,  # orphan: from no queue (a is held, so not even looked at)
        "forbidden": 0,
    }
    clock.advance(LEASE)  # the held lease runs out
    assert client.post("/v1/queues/q.dead/redrive", json={}).json() == {
        "moved": 0,
        "skipped": 2,  # a: taken in q; orphan
        "forbidden": 0,
    }
    assert client.get("/v1/queues/q/messages/a").json()["payload"] == "offered again"


@pytest.mark.parametrize(
    "body", [{"to": "no spaces"}, {"max": 0}, {"max": "1"}, {"max": 1.5}, {"from": "q"}]
)
def test_bad_redrives_are_422_and_move_nothing(client, clock, database, body):
    _dead_letters(client, clock, "a")
    before = stored_rows(database.url)
    response = client.post("/v1/queues/q.dead/redrive", json=body)
    assert response.status_code == 422, response.text
    assert stored_rows(database.url) == before


def test_a_redrive_into_the_queue_itself_skips_every_message(client, clock, database):
    # The schema cannot say that `to` must differ from the path's queue, so the service
    # takes it: every key is taken there (by itself), so nothing moves.
    _dead_letters(client, clock, "a", "b")
    before = stored_rows(database.url)
    response = client.post("/v1/queues/q.dead/redrive", json={"to": "q.dead"})
    assert response.json() == {"moved": 0, "skipped": 2, "forbidden": 0}
    assert stored_rows(database.url) == before


def test_whole_numbers_with_a_fraction_are_integers(client, clock):
    _dead_letters(client, clock, "a", "b")
    assert client.post("/v1/queues/q.dead/redrive", json={"max": 1.0}).json()["moved"] == 1
    response = client.put("/v1/queues/q/settings", json={"max_deliveries": 69.0})
    assert response.json()["max_deliveries"] == 69


def test_an_update_starts_the_count_again(client, clock):
    configure(client, max_deliveries=2)
    put(client, "q", "k", "broken")
    deliver_without_acknowledging(client, clock)
    deliver_without_acknowledging(client, clock)
    assert put(client, "q", "k", "fixed").json()["outcome"] == "updated"
    assert client.get("/v1/queues/q/messages/k").json()["deliveries"] == 0
    (message,) = poll(client, "q")["messages"]
    assert (message["payload"], message["deliveries"]) == ("fixed", 1)


def test_a_dead_letter_waits_while_a_worker_holds_one_with_its_key(client, clock, database):
    configure(client, max_deliveries=1)
    put(client, "q", "k", "first")
    deliver_without_acknowledging(client, clock)
    assert poll(client, "q")["messages"] == []  # "first" moves to q.dead
    holder = poll(client, "q.dead", lease=300)  # and a worker takes it there
    assert keys_of(holder) == ["k"]

    put(client, "q", "k", "second")
    deliver_without_acknowledging(client, clock)
    put(client, "q", "other", 1)
    # "second" is due to move, but "first" is held: it waits, and the poll looks past it.
    assert keys_of(poll(client, "q", lease=300)) == ["other"]
    assert client.get("/v1/queues/q/messages/k").json()["payload"] == "second"
    assert client.delete(f"/v1/queues/q.dead/locks/{holder['lock_id']}").status_code == 204

    clock.advance(30)  # the hold on "second" ends: the next poll moves it
    assert poll(client, "q")["messages"] == []
    assert client.get("/v1/queues/q.dead/messages/k").json()["payload"] == "second"
    assert client.get("/v1/queues/q/messages/k").status_code == 404
    assert [(row["queue"], row["outcome"]) for row in history_rows(database.url)] == [
        ("q", "dead_lettered"),
        ("q.dead", "acknowledged"),
        ("q", "dead_lettered"),
    ]


def test_a_failed_move_keeps_the_poll_and_is_tried_again(store, monkeypatch):
    limited = QueueSettings("q", max_deliveries=1)
    old = Offer(key="old", payload=b"1", scheduled_at=START_MS - 1)
    new = Offer(key="new", payload=b"2", scheduled_at=START_MS)
    store.messages.offer_many("q", [old, new], START_MS)

    def poll_store(limit: int, now: int, lease_ms: int = LEASE * 1000):
        return store.leases.poll("q", limit, str(uuid.uuid4()), now + lease_ms, now, limited)

    assert [d.message.key for d in poll_store(1, START_MS).deliveries] == ["old"]
    later = START_MS + LEASE * 1000  # "old" is due again, past its one delivery

    async def database_gone(*_arguments):
        raise StorageUnavailable("the database is unavailable; retry shortly")

    monkeypatch.setattr(store.storage.leases.dead_letters, "after_poll", database_gone)
    claim = poll_store(2, later, lease_ms=3_600_000)
    assert [d.message.key for d in claim.deliveries] == ["new"]  # delivered all the same
    assert claim.dead_lettered == 0
    monkeypatch.undo()

    assert poll_store(2, later).deliveries == []  # "old" is held a while, "new" leased
    assert poll_store(2, later + 30_000).dead_lettered == 1
    moved = store.messages.get("q.dead", "old")
    assert (moved.deliveries, moved.dead_lettered_from) == (0, "q")
