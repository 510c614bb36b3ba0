"""Trace context (docs/guide/messages.md#trace-context), on every database: an offer's
`traceparent` and `tracestate` headers stored with the message (single, update-only,
generated key, batch: the batch's on every item), shown by polls, reads and lists; a
malformed header ignored, never an error; an update's trace replacing the stored one, an
ignored re-offer's leaving it (a batch's too); cron runs without one; dead letters and
redrives keeping it. Push sends it as headers: tests/contract/test_push.py."""

from __future__ import annotations

import pytest

from tests.support.helpers import poll, put, stored_rows

pytestmark = pytest.mark.usefixtures("clock")

PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
OTHER_PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
STATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"
TRACED = {"traceparent": PARENT, "tracestate": STATE}


def traced_put(client, key: str, payload=None, headers=None, queue: str = "q", **fields):
    return client.put(
        f"/v1/queues/{queue}/messages/{key}",
        json={"payload": payload, **fields},
        headers=TRACED if headers is None else headers,
    )


def read(client, key: str, queue: str = "q") -> dict:
    response = client.get(f"/v1/queues/{queue}/messages/{key}")
    assert response.status_code == 200, response.text
    return response.json()


def stored_trace(database, key: str) -> str | None:
    (row,) = [row for row in stored_rows(database.url) if row["pKey"] == key]
    return row["trace"]


def test_an_offers_trace_is_stored_and_shown_by_polls_reads_and_lists(client, database):
    assert traced_put(client, "k", {"a": 1}).status_code == 201
    assert put(client, "q", "plain", 2).status_code == 201
    shown = {"traceparent": PARENT, "tracestate": STATE}
    assert stored_trace(database, "k") == f"{PARENT}\n{STATE}"
    assert stored_trace(database, "plain") is None
    assert read(client, "k")["trace"] == shown
    assert read(client, "plain")["trace"] is None
    listed = client.get("/v1/queues/q/messages").json()["messages"]
    assert {message["key"]: message["trace"] for message in listed} == {"k": shown, "plain": None}
    polled = poll(client, "q", max=10)
    assert {message["key"]: message["trace"] for message in polled["messages"]} == {
        "k": shown,
        "plain": None,
    }
    # An acknowledgement-on-poll answer shows it too.
    assert traced_put(client, "next", headers={"traceparent": OTHER_PARENT}).status_code == 201
    answer = poll(client, "q", ack={"lock_id": polled["lock_id"]})
    assert sorted(answer["acknowledged"]) == ["k", "plain"]
    assert [message["trace"] for message in answer["messages"]] == [
        {"traceparent": OTHER_PARENT, "tracestate": None}
    ]


def test_every_way_in_carries_it(client, database):
    created = client.post("/v1/queues/q/messages", json={"payload": 1}, headers=TRACED)
    assert created.status_code == 201, created.text
    generated = created.json()["key"]
    assert traced_put(client, "updated", headers={}).status_code == 201
    updated = client.post(
        "/v1/queues/q/messages/updated", json={"payload": 2}, headers={"traceparent": PARENT}
    )
    assert updated.status_code == 200 and updated.json()["outcome"] == "updated"
    batch = client.post(
        "/v1/queues/q/batch",
        json={"messages": [{"key": "b1", "payload": 1}, {"key": "b2", "payload": 2}]},
        headers=TRACED,
    )
    assert batch.status_code == 200 and batch.json()["created"] == 2
    assert stored_trace(database, generated) == f"{PARENT}\n{STATE}"
    assert stored_trace(database, "updated") == PARENT
    # The batch's headers on every item.
    assert stored_trace(database, "b1") == stored_trace(database, "b2") == f"{PARENT}\n{STATE}"


@pytest.mark.parametrize(
    "headers",
    [
        {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"},  # no flags
        {"traceparent": PARENT.upper(), "tracestate": STATE},
        {"traceparent": "ff" + PARENT[2:], "tracestate": STATE},
        {"traceparent": PARENT.replace("4bf92f3577b34da6a3ce929d0e0e4736", "0" * 32)},
        {"traceparent": "garbage"},
        {"tracestate": STATE},  # a tracestate alone
        [("traceparent", PARENT), ("traceparent", OTHER_PARENT)],  # more than one
    ],
)
def test_a_malformed_traceparent_is_ignored_and_the_offer_still_goes_in(client, database, headers):
    single = traced_put(client, "k", 1, headers=headers)
    assert single.status_code == 201, single.text
    batch = client.post(
        "/v1/queues/q/batch", json={"messages": [{"key": "b", "payload": 1}]}, headers=headers
    )
    assert batch.status_code == 200, batch.text
    assert [row["trace"] for row in stored_rows(database.url)] == [None, None]
    assert read(client, "k")["trace"] is None


def test_a_malformed_tracestate_is_dropped_alone(client, database):
    headers = {"traceparent": PARENT, "tracestate": "Bad Key=1"}
    assert traced_put(client, "k", 1, headers=headers).status_code == 201
    assert stored_trace(database, "k") == PARENT
    assert read(client, "k")["trace"] == {"traceparent": PARENT, "tracestate": None}


def test_several_tracestate_headers_are_joined(client):
    headers = [("traceparent", PARENT), ("tracestate", "a=1, ,b=2"), ("tracestate", "c=3")]
    assert traced_put(client, "k", 1, headers=headers).status_code == 201
    assert read(client, "k")["trace"]["tracestate"] == "a=1,b=2,c=3"


def test_an_update_replaces_it_and_an_ignored_re_offer_keeps_it(client, database):
    assert traced_put(client, "k", 1).status_code == 201
    # The same message with another trace, or none: ignored, nothing written.
    before = stored_rows(database.url)
    again = traced_put(client, "k", 1, headers={"traceparent": OTHER_PARENT})
    assert again.json()["outcome"] == "ignored"
    assert traced_put(client, "k", 1, headers={}).json()["outcome"] == "ignored"
    assert stored_rows(database.url) == before
    # Changed: the message is now what the update said, its trace included.
    changed = traced_put(client, "k", 2, headers={"traceparent": OTHER_PARENT})
    assert changed.json()["outcome"] == "updated"
    assert stored_trace(database, "k") == OTHER_PARENT
    assert traced_put(client, "k", 3, headers={}).json()["outcome"] == "updated"
    assert stored_trace(database, "k") is None
    # A batch's update too.
    batch = client.post(
        "/v1/queues/q/batch", json={"messages": [{"key": "k", "payload": 4}]}, headers=TRACED
    )
    assert batch.json()["updated"] == 1
    assert stored_trace(database, "k") == f"{PARENT}\n{STATE}"


def batch(client, items: dict[str, object], headers: dict[str, str]) -> dict:
    messages = [{"key": key, "payload": payload} for key, payload in items.items()]
    response = client.post("/v1/queues/q/batch", json={"messages": messages}, headers=headers)
    assert response.status_code == 200, response.text
    return response.json()


def outcomes(answer: dict) -> dict[str, str]:
    return {result["key"]: result["outcome"] for result in answer["results"]}


def test_a_batch_re_offer_identical_but_for_its_trace_is_ignored(client, database):
    assert batch(client, {"a": 1, "b": {"n": 2}}, TRACED)["created"] == 2
    before = stored_rows(database.url)
    # Another trace, a tracestate alone changed, or none: the same messages, nothing written.
    for headers in (
        {"traceparent": OTHER_PARENT},
        {"traceparent": PARENT, "tracestate": "rojo=1"},
        {},
    ):
        answer = batch(client, {"a": 1, "b": {"n": 2}}, headers)
        assert outcomes(answer) == {"a": "ignored", "b": "ignored"}
        assert (answer["created"], answer["updated"], answer["ignored"]) == (0, 0, 2)
    assert stored_rows(database.url) == before
    assert stored_trace(database, "a") == stored_trace(database, "b") == f"{PARENT}\n{STATE}"


def test_a_batch_that_changes_a_message_gives_it_the_batchs_trace(client, database):
    assert batch(client, {"a": 1, "b": 2}, TRACED)["created"] == 2
    assert put(client, "q", "plain", 3).status_code == 201
    # A changed payload takes the batch's trace; an unchanged item in the same batch
    # keeps its own, and a new one is created with the batch's.
    answer = batch(client, {"a": 10, "b": 2, "plain": 30, "new": 4}, {"traceparent": OTHER_PARENT})
    assert outcomes(answer) == {
        "a": "updated",
        "b": "ignored",
        "plain": "updated",
        "new": "created",
    }
    assert stored_trace(database, "a") == OTHER_PARENT
    assert stored_trace(database, "b") == f"{PARENT}\n{STATE}"
    assert stored_trace(database, "plain") == OTHER_PARENT
    assert stored_trace(database, "new") == OTHER_PARENT
    # A batch without trace context that changes them leaves them none.
    answer = batch(client, {"a": 11, "b": 20}, {})
    assert outcomes(answer) == {"a": "updated", "b": "updated"}
    assert stored_trace(database, "a") is None and stored_trace(database, "b") is None
    assert read(client, "a")["trace"] is None
    assert read(client, "new")["trace"] == {"traceparent": OTHER_PARENT, "tracestate": None}


def test_cron_runs_carry_none(client, database):
    response = client.put(
        "/v1/queues/q/cron/nightly",
        json={"payload": 1, "daily": ["02:00"], "timezone": "UTC"},
        headers=TRACED,
    )
    assert response.status_code == 201, response.text
    rows = stored_rows(database.url)
    assert rows and {row["trace"] for row in rows} == {None}


def test_a_dead_letter_and_its_redrive_keep_it(client, clock, database):
    assert client.put("/v1/queues/q/settings", json={"max_deliveries": 1}).status_code == 200
    assert traced_put(client, "k", 1).status_code == 201
    poll(client, "q", lease=30)
    clock.advance(30_000)
    assert poll(client, "q")["messages"] == []  # past its deliveries: dead-lettered
    shown = {"traceparent": PARENT, "tracestate": STATE}
    dead = read(client, "k", "q.dead")
    assert (dead["dead_lettered_from"], dead["trace"]) == ("q", shown)
    redriven = client.post("/v1/queues/q.dead/redrive", json={})
    assert redriven.json()["moved"] == 1
    (back,) = poll(client, "q")["messages"]
    assert (back["key"], back["trace"]) == ("k", shown)
