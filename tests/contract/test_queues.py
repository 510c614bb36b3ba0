"""Queue stats, the queue list, and purge."""

from __future__ import annotations

from tests.conftest import START_MS
from tests.support.helpers import at, poll, put, stored_rows

EMPTY = {
    "messages": 0,
    "ready": 0,
    "scheduled": 0,
    "leased": 0,
    "oldest_ready_at": None,
    "next_scheduled_at": None,
    "paused": False,
    "paused_at": None,
}


def test_stats_of_an_unknown_queue_are_zeros(client):
    response = client.get("/v1/queues/nothing-here")
    assert response.status_code == 200
    assert response.json() == {"queue": "nothing-here", **EMPTY}


def test_stats_count_messages_by_state(client, clock):
    put(client, "q", "ready-1", 1)
    clock.advance(1)
    put(client, "q", "ready-2", 1)
    put(client, "q", "leased", 1, scheduled_at=at(START_MS - 5_000))
    poll(client, "q", lease=100)  # takes the oldest: "leased"
    put(client, "q", "later", 1, delay=50)
    put(client, "q", "much-later", 1, delay=500)
    assert client.get("/v1/queues/q").json() == {
        "queue": "q",
        "messages": 5,
        "ready": 2,
        "scheduled": 2,
        "leased": 1,
        "oldest_ready_at": at(START_MS),
        "next_scheduled_at": at(START_MS + 51_000),
        "paused": False,
        "paused_at": None,
    }
    clock.advance(100)  # the lease ends: the message is ready again
    stats = client.get("/v1/queues/q").json()
    assert (stats["ready"], stats["leased"], stats["scheduled"]) == (4, 0, 1)


def test_list_shows_queues_holding_messages(client):
    assert client.get("/v1/queues").json() == {"queues": []}
    put(client, "beta", "k", 1)
    put(client, "alpha", "k1", 1)
    put(client, "alpha", "k2", 1, delay=10)
    queues = client.get("/v1/queues").json()["queues"]
    assert [(q["queue"], q["messages"], q["ready"], q["scheduled"]) for q in queues] == [
        ("alpha", 2, 1, 1),
        ("beta", 1, 1, 0),
    ]
    client.delete("/v1/queues/beta/messages/k")
    assert [q["queue"] for q in client.get("/v1/queues").json()["queues"]] == ["alpha"]


def test_purge_needs_the_queue_name_confirmed(client, clean_database):
    for index in range(3):
        put(client, "q", f"k{index}", index)
    put(client, "other", "k", 1)
    for query in ("", "?confirm=", "?confirm=other", "?confirm=Q"):
        response = client.delete(f"/v1/queues/q{query}")
        assert response.status_code == 400
        assert response.headers["content-type"] == "application/problem+json"
    assert len(stored_rows(clean_database.url)) == 4
    response = client.delete("/v1/queues/q?confirm=q")
    assert response.status_code == 200
    assert response.json() == {"deleted": 3}
    assert [row["pKind"] for row in stored_rows(clean_database.url)] == ["other"]
    assert client.delete("/v1/queues/q?confirm=q").json() == {"deleted": 0}
