"""Acknowledging and releasing some of a lock's messages by key (decision 14), on every
database: what the lock still holds goes, anything else is `missing` and unchanged."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from tests.conftest import START_MS
from tests.support.helpers import at, history_rows, keys_of, poll, put, stored_rows

LEASE = 30


def ack(client, lock_id: str, keys, queue: str = "q"):
    return client.post(f"/v1/queues/{queue}/locks/{lock_id}/ack", json={"keys": keys})


def acked(client, lock_id: str, keys, queue: str = "q") -> dict:
    response = ack(client, lock_id, keys, queue)
    assert response.status_code == 200, response.text
    return response.json()


def release(client, lock_id: str, queue: str = "q", **body):
    return client.post(f"/v1/queues/{queue}/locks/{lock_id}/release", json=body)


def message(client, key: str, queue: str = "q") -> dict:
    response = client.get(f"/v1/queues/{queue}/messages/{key}")
    assert response.status_code == 200, response.text
    return response.json()


def offer_and_poll(client, keys: list[str], queue: str = "q") -> str:
    """Offer `keys` (due now, in that order) and poll them all under one lock."""
    for key in keys:
        assert put(client, queue, key, key).status_code == 201
    polled = poll(client, queue, max=len(keys), lease=LEASE)
    assert sorted(keys_of(polled)) == sorted(keys)
    return polled["lock_id"]


def test_acknowledging_some_keys_leaves_the_others_leased(client):
    lock = offer_and_poll(client, ["a", "b", "c", "d"])
    assert acked(client, lock, ["c", "a"]) == {"acknowledged": ["c", "a"], "missing": []}
    assert client.get("/v1/queues/q/messages/a").status_code == 404
    assert client.get("/v1/queues/q/messages/c").status_code == 404
    assert {message(client, key)["state"] for key in ("b", "d")} == {"leased"}
    assert poll(client, "q")["messages"] == []  # still leased, nobody else gets them
    # The rest stay the lock's, to acknowledge by key or whole.
    assert acked(client, lock, ["b"]) == {"acknowledged": ["b"], "missing": []}
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
    assert client.get("/v1/queues/q").json()["messages"] == 0
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 404


def test_keys_the_lock_never_held_are_missing(client):
    lock = offer_and_poll(client, ["a"])
    put(client, "q", "unpolled", 1, delay=60)
    put(client, "other", "a", 1)
    assert acked(client, lock, ["nope", "a", "unpolled"]) == {
        "acknowledged": ["a"],
        "missing": ["nope", "unpolled"],
    }
    assert message(client, "unpolled")["state"] == "scheduled"
    assert message(client, "a", queue="other")["state"] == "ready"  # another queue's "a"


def test_keys_of_another_lock_are_missing_and_stay_with_it(client):
    first = offer_and_poll(client, ["a"])
    second = offer_and_poll(client, ["b"])
    assert acked(client, first, ["b"]) == {"acknowledged": [], "missing": ["b"]}
    assert message(client, "b")["state"] == "leased"
    assert acked(client, second, ["b"]) == {"acknowledged": ["b"], "missing": []}
    assert message(client, "a")["state"] == "leased"


def test_a_key_whose_lease_ran_out_and_another_poll_took_is_missing_and_unchanged(
    client, clock, database
):
    first = offer_and_poll(client, ["a", "b"])
    clock.advance(LEASE)
    # Both leases ran out; another poll takes "a" only.
    second = poll(client, "q", lease=LEASE)
    assert keys_of(second) == ["a"]
    before = {row["pKey"]: row for row in stored_rows(database.url)}
    assert acked(client, first, ["a", "b"]) == {"acknowledged": ["b"], "missing": ["a"]}
    after = {row["pKey"]: row for row in stored_rows(database.url)}
    assert after == {"a": before["a"]}  # nothing of "a" changed: still held by the new lock
    assert message(client, "a")["deliveries"] == 2
    assert acked(client, second["lock_id"], ["a"]) == {"acknowledged": ["a"], "missing": []}


def test_an_expired_lease_no_poll_took_still_acknowledges_by_key(client, clock):
    lock = offer_and_poll(client, ["a", "b"])
    clock.advance(LEASE * 2)
    assert acked(client, lock, ["a"]) == {"acknowledged": ["a"], "missing": []}
    assert keys_of(poll(client, "q")) == ["b"]


def test_a_key_updated_by_an_offer_after_the_poll_is_missing(client, database):
    lock = offer_and_poll(client, ["a", "b"])
    assert put(client, "q", "a", "new content").status_code == 200
    assert acked(client, lock, ["a", "b"]) == {"acknowledged": ["b"], "missing": ["a"]}
    updated = message(client, "a")
    assert (updated["payload"], updated["state"], updated["deliveries"]) == (
        "new content",
        "ready",
        0,
    )
    assert [row["key"] for row in history_rows(database.url)] == ["b"]


def test_a_repeated_key_counts_once_where_it_first_appears(client):
    lock = offer_and_poll(client, ["a", "b"])
    assert acked(client, lock, ["x", "b", "a", "x", "b"]) == {
        "acknowledged": ["b", "a"],
        "missing": ["x"],
    }


# A fixed id: test ids must be the same in every pytest-xdist process.
@pytest.mark.parametrize("lock_id", ["not-a-lock", "0b6f1c9e-2d7a-4f43-9a51-7c3e8d2f6a10"])
def test_a_lock_that_holds_nothing_answers_every_key_missing(client, lock_id):
    offer_and_poll(client, ["a"])
    assert acked(client, lock_id, ["a"]) == {"acknowledged": [], "missing": ["a"]}
    assert message(client, "a")["state"] == "leased"


def test_acknowledgements_by_key_write_history_rows_like_whole_lock_ones(client, clock, database):
    for key in ("by-key", "whole"):
        put(client, "q", key, 1, delay=10)
    clock.advance(12)
    first = poll(client, "q", max=2, lease=LEASE)
    clock.advance(1)
    assert release(client, first["lock_id"]).status_code == 204
    clock.advance(2)
    lock = poll(client, "q", max=2, lease=LEASE)["lock_id"]
    clock.advance(3)
    assert acked(client, lock, ["by-key"])["acknowledged"] == ["by-key"]
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
    rows = {row.pop("key"): row for row in history_rows(database.url)}
    expected = {
        "queue": "q",
        "scheduledAt": START_MS + 10_000,
        "createdAt": START_MS,
        "firstDeliveredAt": START_MS + 12_000,
        "lastDeliveredAt": START_MS + 15_000,
        "deliveries": 2,
        "outcome": "acknowledged",
        "finishedAt": START_MS + 18_000,
    }
    assert rows == {"by-key": expected, "whole": expected}


def test_acknowledging_by_key_records_nothing_when_history_is_off(clean_database, clock):
    database = clean_database
    with TestClient(create_app(database.settings(history=False), clock=clock)) as client:
        lock = offer_and_poll(client, ["a", "b"])
        assert acked(client, lock, ["a", "x"]) == {"acknowledged": ["a"], "missing": ["x"]}
    assert history_rows(database.url) == []
    assert [row["pKey"] for row in stored_rows(database.url)] == ["b"]


def test_releasing_some_keys_gives_back_only_those(client, clock):
    lock = offer_and_poll(client, ["a", "b", "c"])
    clock.advance(1)
    response = release(client, lock, keys=["c", "nope", "a"])
    assert response.status_code == 200, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.json() == {"released": ["c", "a"], "missing": ["nope"]}
    assert message(client, "b")["state"] == "leased"
    redelivered = poll(client, "q", max=10)
    assert [(m["key"], m["delivery"]) for m in redelivered["messages"]] == [
        ("a", "redelivery"),
        ("c", "redelivery"),
    ]
    # Released keys are the lock's no more; the one it kept still is.
    assert release(client, lock, keys=["a", "b"]).json() == {"released": ["b"], "missing": ["a"]}
    assert message(client, "a")["state"] == "leased"  # the new lock's


def test_a_keyed_release_with_a_delay(client, clock):
    lock = offer_and_poll(client, ["a", "b"])
    response = release(client, lock, keys=["a"], delay=20)
    assert response.json() == {"released": ["a"], "missing": []}
    assert message(client, "a")["scheduled_at"] == at(START_MS + 20_000)
    assert message(client, "a")["state"] == "scheduled"
    clock.advance(19.999)
    assert poll(client, "q")["messages"] == []
    clock.advance(0.001)
    assert keys_of(poll(client, "q")) == ["a"]


def test_a_keyed_release_of_a_key_another_poll_took_changes_nothing(client, clock, database):
    first = offer_and_poll(client, ["a"])
    clock.advance(LEASE)
    second = poll(client, "q", lease=LEASE)
    before = stored_rows(database.url)
    assert release(client, first, keys=["a"]).json() == {"released": [], "missing": ["a"]}
    assert stored_rows(database.url) == before
    assert acked(client, second["lock_id"], ["a"])["acknowledged"] == ["a"]


def test_a_release_without_keys_is_as_before(client):
    lock = offer_and_poll(client, ["a"])
    response = release(client, lock)
    assert response.status_code == 204 and response.content == b""
    assert release(client, lock).status_code == 404
    assert client.post(f"/v1/queues/q/locks/{lock}/release").status_code == 404


@pytest.mark.parametrize(
    "body",
    [
        {"keys": []},
        {"keys": [f"k{index}" for index in range(1001)]},
        {"keys": [""]},
        {"keys": ["a", "bad\nkey"]},
        {"keys": ["x" * 201]},
        {"keys": [1]},
        {"keys": "a"},
        {"keys": None},
        {},
        {"keys": ["a"], "delay": 1},  # acknowledging has no delay
    ],
)
def test_bad_acknowledgements_by_key_are_422_and_change_nothing(client, database, body):
    lock = offer_and_poll(client, ["a"])
    before = stored_rows(database.url)
    response = client.post(f"/v1/queues/q/locks/{lock}/ack", json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert stored_rows(database.url) == before
    assert history_rows(database.url) == []


@pytest.mark.parametrize(
    "body",
    [
        {"keys": []},
        {"keys": [f"k{index}" for index in range(1001)]},
        {"keys": ["a", "bad\tkey"]},
        {"keys": ["a"], "delay": -1},
        {"keys": ["a"], "delay": "5"},
        {"key": ["a"]},
    ],
)
def test_bad_releases_by_key_are_422_and_change_nothing(client, database, body):
    lock = offer_and_poll(client, ["a"])
    before = stored_rows(database.url)
    response = release(client, lock, **body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert stored_rows(database.url) == before


def test_a_thousand_keys_are_taken(client):
    batch = [{"key": f"k{index:04d}", "payload": index} for index in range(1000)]
    assert client.post("/v1/queues/q/batch", json={"messages": batch}).json()["created"] == 1000
    lock = poll(client, "q", max=1000)["lock_id"]
    keys = [f"k{index:04d}" for index in range(1000)]
    outcome = acked(client, lock, keys[:500] + [f"other{index}" for index in range(500)])
    assert outcome["acknowledged"] == keys[:500] and len(outcome["missing"]) == 500
    assert release(client, lock, keys=keys[500:]).json() == {
        "released": keys[500:],
        "missing": [],
    }
    assert client.get("/v1/queues/q").json()["ready"] == 500


ADMIN, TEAM = "admin-token", "team-token"


@pytest.fixture
def scoped(clean_database, clock) -> Iterator[TestClient]:
    settings = clean_database.settings(api_tokens=f"{ADMIN},{TEAM}=team-*")
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client


def test_tokens_and_their_queue_globs_hold_for_keyed_locks(scoped):
    admin = {"Authorization": f"Bearer {ADMIN}"}
    team = {"Authorization": f"Bearer {TEAM}"}
    for queue in ("team-a", "billing"):
        assert scoped.put(f"/v1/queues/{queue}/messages/k", json={"payload": 1}, headers=admin)
    billing = scoped.post("/v1/queues/billing/poll", json={}, headers=admin).json()["lock_id"]
    mine = scoped.post("/v1/queues/team-a/poll", json={}, headers=team).json()["lock_id"]
    for path, body in (
        (f"/v1/queues/billing/locks/{billing}/ack", {"keys": ["k"]}),
        (f"/v1/queues/billing/locks/{billing}/release", {"keys": ["k"]}),
    ):
        assert scoped.post(path, json=body).status_code == 401
        forbidden = scoped.post(path, json=body, headers=team)
        assert forbidden.status_code == 403
        assert forbidden.headers["content-type"] == "application/problem+json"
    assert scoped.get("/v1/queues/billing/messages/k", headers=admin).json()["state"] == "leased"
    answer = scoped.post(f"/v1/queues/team-a/locks/{mine}/ack", json={"keys": ["k"]}, headers=team)
    assert answer.json() == {"acknowledged": ["k"], "missing": []}
