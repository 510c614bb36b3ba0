"""Acknowledgement on the next poll (decision 21), on every database: a poll's `ack` acknowledges
as `DELETE …/locks/{id}` or `POST …/locks/{id}/ack` would, in a transaction of its own that
commits before the poll claims (and before a long poll waits), and the answer says what it did."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.main import create_app
from tests.contract.test_long_poll import RETURNED_EARLY, WAIT, WaitingPolls
from tests.support.helpers import history_rows, keys_of, poll, put, stored_rows

LEASE = 30


def offer_and_poll(client, keys: list[str], queue: str = "q") -> str:
    """Offer `keys` (due now, in that order) and poll them all under one lock."""
    for key in keys:
        assert put(client, queue, key, key).status_code == 201
    polled = poll(client, queue, max=len(keys), lease=LEASE)
    assert sorted(keys_of(polled)) == sorted(keys)
    return polled["lock_id"]


def state(client, key: str, queue: str = "q") -> str | None:
    """The message's state, or None when it is gone."""
    response = client.get(f"/v1/queues/{queue}/messages/{key}")
    if response.status_code == 404:
        return None
    assert response.status_code == 200, response.text
    return response.json()["state"]


def acknowledged_total(client, queue: str = "q") -> float:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            name, labels = sample.name, sample.labels
            if name == "hourglass_messages_acknowledged_total" and labels.get("queue") == queue:
                return sample.value
    return 0.0


def test_a_whole_lock_is_acknowledged_before_the_poll_claims(client, database):
    lock = offer_and_poll(client, ["a", "b"])
    put(client, "q", "c", "c")
    polled = poll(client, "q", ack={"lock_id": lock}, lease=LEASE)
    assert sorted(polled.pop("acknowledged")) == ["a", "b"]
    assert polled.pop("missing") == []
    assert keys_of(polled) == ["c"] and polled["lock_id"] not in (None, lock)
    assert [state(client, key) for key in ("a", "b", "c")] == [None, None, "leased"]
    assert sorted(row["key"] for row in history_rows(database.url)) == ["a", "b"]
    assert {row["outcome"] for row in history_rows(database.url)} == {"acknowledged"}
    assert acknowledged_total(client) == 2  # as the acknowledging routes count them
    # Acknowledged already: the lock holds nothing, as DELETE …/locks/{id} would find.
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 404


def test_some_keys_are_acknowledged_as_the_ack_route_does(client, database):
    lock = offer_and_poll(client, ["a", "b", "c"])
    polled = poll(client, "q", ack={"lock_id": lock, "keys": ["c", "x", "a", "c"]})
    assert polled == {"lock_id": None, "messages": [], "acknowledged": ["c", "a"], "missing": ["x"]}
    assert [state(client, key) for key in ("a", "b", "c")] == [None, "leased", None]
    assert acknowledged_total(client) == 2
    # What the lock holds besides stays its own.
    assert client.post(f"/v1/queues/q/locks/{lock}/ack", json={"keys": ["b"]}).json() == {
        "acknowledged": ["b"],
        "missing": [],
    }
    assert sorted(row["key"] for row in history_rows(database.url)) == ["a", "b", "c"]


@pytest.mark.parametrize(
    "lock_id",
    ["acknowledged already", "not-a-lock", "0b6f1c9e-2d7a-4f43-9a51-7c3e8d2f6a10"],
)
def test_a_lock_that_holds_nothing_acknowledges_nothing_and_the_poll_goes_on(client, lock_id):
    if lock_id == "acknowledged already":
        lock_id = offer_and_poll(client, ["done"])
        assert client.delete(f"/v1/queues/q/locks/{lock_id}").status_code == 204
    put(client, "q", "next", 1)
    counted = acknowledged_total(client)
    polled = poll(client, "q", ack={"lock_id": lock_id})
    assert (polled["acknowledged"], polled["missing"]) == ([], [])
    assert keys_of(polled) == ["next"]
    keyed = poll(client, "q", ack={"lock_id": lock_id, "keys": ["done", "next"]})
    assert keyed == {
        "lock_id": None,
        "messages": [],
        "acknowledged": [],
        "missing": ["done", "next"],
    }
    assert state(client, "next") == "leased"
    assert acknowledged_total(client) == counted


def test_a_lock_of_another_queue_acknowledges_nothing(client):
    lock = offer_and_poll(client, ["a"], queue="other")
    polled = poll(client, "q", ack={"lock_id": lock})
    assert polled == {"lock_id": None, "messages": [], "acknowledged": [], "missing": []}
    keyed = poll(client, "q", ack={"lock_id": lock, "keys": ["a"]})
    assert (keyed["acknowledged"], keyed["missing"]) == ([], ["a"])
    assert state(client, "a", queue="other") == "leased"
    assert acknowledged_total(client, "other") == 0


@pytest.mark.parametrize("keys", [None, ["a", "b"]], ids=["whole lock", "by key"])
def test_a_message_updated_since_its_poll_is_kept(client, database, keys):
    lock = offer_and_poll(client, ["a", "b"])
    assert put(client, "q", "a", "new content", delay=60).status_code == 200
    ack = {"lock_id": lock} if keys is None else {"lock_id": lock, "keys": keys}
    polled = poll(client, "q", ack=ack)
    assert (polled["acknowledged"], polled["missing"]) == (["b"], [] if keys is None else ["a"])
    assert polled["messages"] == []
    updated = client.get("/v1/queues/q/messages/a").json()
    assert (updated["payload"], updated["state"], updated["deliveries"]) == (
        "new content",
        "scheduled",
        0,
    )
    assert [row["key"] for row in history_rows(database.url)] == ["b"]


def test_a_poll_without_ack_answers_as_before(client):
    lock = offer_and_poll(client, ["a"])
    for body in ({}, {"ack": None}):
        response = client.post("/v1/queues/q/poll", json=body)
        assert response.content == b'{"lock_id":null,"messages":[]}'
    assert state(client, "a") == "leased"
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204


LOCK = "<the lock>"


@pytest.mark.parametrize(
    "ack",
    [
        {},
        {"keys": ["a"]},
        {"lock_id": None},
        {"lock_id": 5},
        {"lock_id": LOCK, "keys": []},
        {"lock_id": LOCK, "keys": [f"k{index}" for index in range(1001)]},
        {"lock_id": LOCK, "keys": ["a", "bad\nkey"]},
        {"lock_id": LOCK, "keys": ["x" * 201]},
        {"lock_id": LOCK, "keys": [1]},
        {"lock_id": LOCK, "keys": "a"},
        {"lock_id": LOCK, "delay": 1},  # unknown fields are refused
        LOCK,
        [LOCK],
    ],
)
def test_a_bad_ack_is_422_and_writes_nothing(client, database, ack):
    lock = offer_and_poll(client, ["a"])
    put(client, "q", "ready", 1)
    if ack == LOCK:
        ack = lock
    elif isinstance(ack, list):
        ack = [lock]
    elif ack.get("lock_id") == LOCK:
        ack = {**ack, "lock_id": lock}
    before = stored_rows(database.url)
    response = client.post("/v1/queues/q/poll", json={"ack": ack})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["errors"][0]["loc"][:2] == ["body", "ack"]
    assert stored_rows(database.url) == before  # "a" still leased, "ready" not claimed
    assert history_rows(database.url) == []


@pytest.fixture
def long_poll_client(clean_database, clock):
    # Rechecks as rarely as allowed: only a wake-up can end these polls early.
    settings = clean_database.settings(poll_recheck_seconds=WAIT)
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client, WaitingPolls(client.app.state.service)


def test_the_acknowledgement_commits_before_a_long_poll_waits(long_poll_client, clean_database):
    client, waiting = long_poll_client
    lock = offer_and_poll(client, ["a", "b"])
    with ThreadPoolExecutor(1) as pool:
        result = pool.submit(poll, client, "q", wait=WAIT, ack={"lock_id": lock, "keys": ["a"]})
        waiting.wait_for(1)  # the queue held nothing due: the poll waits
        # Committed: another connection sees "a" gone while the poll still waits.
        assert [row["pKey"] for row in stored_rows(clean_database.url)] == ["b"]
        assert state(client, "a") is None and not result.done()
        assert put(client, "q", "c", 1).status_code == 201  # wakes the poll
        polled = result.result(timeout=RETURNED_EARLY)
    assert keys_of(polled) == ["c"]
    assert (polled["acknowledged"], polled["missing"]) == (["a"], [])


def test_the_acknowledgement_stands_when_a_long_poll_finds_nothing(client):
    lock = offer_and_poll(client, ["a"])
    polled = poll(client, "q", wait=0.2, ack={"lock_id": lock})
    assert polled == {"lock_id": None, "messages": [], "acknowledged": ["a"], "missing": []}
    assert state(client, "a") is None


@pytest.mark.parametrize("keys", [None, ["a", "x"]], ids=["whole lock", "by key"])
def test_the_acknowledgement_records_nothing_when_history_is_off(clean_database, clock, keys):
    database = clean_database
    with TestClient(create_app(database.settings(history=False), clock=clock)) as client:
        lock = offer_and_poll(client, ["a"])
        put(client, "q", "b", "b")
        ack = {"lock_id": lock} if keys is None else {"lock_id": lock, "keys": keys}
        polled = poll(client, "q", ack=ack)
        assert (polled["acknowledged"], polled["missing"]) == (["a"], [] if keys is None else ["x"])
        assert keys_of(polled) == ["b"]
    assert history_rows(database.url) == []
    assert [row["pKey"] for row in stored_rows(database.url)] == ["b"]
