"""Payload nesting: at most MAX_PAYLOAD_DEPTH levels on every way in over HTTP, and every
stored payload readable however deep."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import create_engine, update

from app.domain.payloads import MAX_PAYLOAD_DEPTH
from app.storage.tables import cron_entries, delayed_queue
from tests.support.helpers import cron_rows, put, stored_rows

HEADERS = {"content-type": "application/json"}


def nested(depth: int, shape: str) -> bytes:
    """JSON text of arrays or objects `depth` levels deep around a number."""
    opening, closing = (b"[", b"]") if shape == "arrays" else (b'{"a":', b"}")
    return opening * depth + b"7" + closing * depth


def _send(method: str, path: str, head: bytes, tail: bytes = b"}"):
    """A way in: sends `head`, the payload's JSON text, then `tail`, as one JSON body."""
    return lambda client, payload: client.request(
        method, path, content=head + payload + tail, headers=HEADERS
    )


WAYS_IN = {
    "put": _send("PUT", "/v1/queues/q/messages/k", b'{"payload":'),
    "update": _send("POST", "/v1/queues/q/messages/k", b'{"payload":'),
    "generated key": _send("POST", "/v1/queues/q/messages", b'{"payload":'),
    # A valid item first: the batch is refused whole.
    "batch": _send(
        "POST",
        "/v1/queues/q/batch",
        b'{"messages":[{"key":"fine","payload":1},{"key":"k","payload":',
        b"}]}",
    ),
    "cron": _send("PUT", "/v1/queues/q/cron/e", b'{"every":60,"payload":'),
}


@pytest.mark.parametrize("way_in", WAYS_IN)
def test_a_payload_at_the_limit_is_taken_and_reads_back(client, way_in):
    for shape in ("arrays", "objects"):
        payload = nested(MAX_PAYLOAD_DEPTH, shape)
        put(client, "q", "k", 0)  # what the update updates
        response = WAYS_IN[way_in](client, payload)
        assert response.status_code in (200, 201), response.text
        if way_in == "cron":
            shown = client.get("/v1/queues/q/cron/e").json()["payload"]
        else:
            key = response.json()["key"] if way_in == "generated key" else "k"
            shown = client.get(f"/v1/queues/q/messages/{key}").json()["payload"]
        assert shown == json.loads(payload)


@pytest.mark.parametrize("way_in", WAYS_IN)
def test_a_payload_past_the_limit_is_422_and_nothing_is_written(client, clean_database, way_in):
    put(client, "q", "k", "before")  # what an update must leave alone
    before = stored_rows(clean_database.url)
    # One level past the limit; the case found before there was one (254 levels of
    # objects around a number: 201, then every read 500); deeper than pydantic validates
    # (255); and deeper than the body's JSON parser goes (~990 levels).
    for depth, shape in [
        (MAX_PAYLOAD_DEPTH + 1, "arrays"),
        (MAX_PAYLOAD_DEPTH + 1, "objects"),
        (254, "objects"),
        (500, "arrays"),
        (100_000, "arrays"),
    ]:
        response = WAYS_IN[way_in](client, nested(depth, shape))
        assert response.status_code == 422, (depth, shape, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        problem = response.json()
        if depth < 900:  # deeper, the parser gives up first: an invalid request
            assert problem["type"] == "urn:hourglass:problem:payload-too-deep", problem
            assert f"{MAX_PAYLOAD_DEPTH} levels" in problem["detail"]
    assert stored_rows(clean_database.url) == before
    assert cron_rows(clean_database.url) == []
    assert client.get("/v1/queues/q/cron").json() == {"entries": []}


def _store_payload(url: str, table, payload: bytes) -> None:
    """Rewrite every payload of `table` in place, as rows stored before the limit may
    hold them (the API took up to 255 levels, an import up to ~990)."""
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(update(table).values(payload=payload))
    finally:
        engine.dispose()


@pytest.mark.parametrize("depth", [300, 5000])
def test_a_stored_message_too_deep_for_any_parser_still_reads(client, clean_database, depth):
    put(client, "q", "k", 0)
    deep = nested(depth, "arrays")
    _store_payload(clean_database.url, delayed_queue, deep)

    read = client.get("/v1/queues/q/messages/k")
    assert read.status_code == 200
    assert read.content.startswith(b'{"queue":"q","key":"k","payload":' + deep + b',"scheduled_at"')
    polled = client.post("/v1/queues/q/poll", json={})
    assert polled.status_code == 200
    assert b'"payload":' + deep + b',"scheduled_at"' in polled.content
    if depth < 900:  # within what Python's json, and so this test, can parse
        assert read.json()["payload"] == json.loads(deep)
        assert polled.json()["messages"][0]["payload"] == json.loads(deep)


@pytest.mark.parametrize("depth", [300, 5000])
def test_a_stored_cron_entry_too_deep_for_any_parser_still_reads(client, clean_database, depth):
    assert client.put("/v1/queues/q/cron/e", json={"every": 60, "payload": 0}).status_code == 201
    deep = nested(depth, "objects")
    _store_payload(clean_database.url, cron_entries, deep)

    listed = client.get("/v1/queues/q/cron")
    one = client.get("/v1/queues/q/cron/e")
    assert (listed.status_code, one.status_code) == (200, 200)
    entry = b'{"queue":"q","name":"e","cron":null,"every":60.0,"daily":null,"timezone":"UTC"'
    stored = b',"payload":' + deep + b',"lookahead":null,'
    assert one.content.startswith(entry + stored)
    assert listed.content.startswith(b'{"entries":[' + entry + stored)
    if depth < 900:
        assert listed.json() == {"entries": [one.json()]}
        assert one.json()["payload"] == json.loads(deep)
    assert client.delete("/v1/queues/q/cron/e").status_code == 204
