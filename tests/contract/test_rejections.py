"""Bad input: a clear 4xx as problem+json, and nothing written."""

from __future__ import annotations

import pytest

from tests.support.helpers import put, stored_rows


def _assert_problem(response, status: int) -> dict:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    body = response.json()
    assert body["status"] == status
    assert {"type", "title", "detail"} <= body.keys()
    return body


@pytest.mark.parametrize(
    "body",
    [
        {},  # no payload
        {"payload": 1, "delay_seconds": 5},  # unknown field: a typo must not mean "now"
        {"payload": 1, "delay": -1},
        {"payload": 1, "delay": "soon"},
        {"payload": 1, "delay": 5, "scheduled_at": "2026-11-26T09:00:00Z"},
        {"payload": 1, "scheduled_at": "2026-11-26T09:00:00"},  # no zone
        {"payload": 1, "scheduled_at": "next friday"},
        {"payload": 1, "if_exists": "replace"},
        {"payload": 1, "delay": 1e12},
        # Types are not coerced: a string or a boolean is not a number of seconds.
        {"payload": 1, "delay": "60"},
        {"payload": 1, "delay": True},
        {"payload": 1, "scheduled_at": 1795683600000},
        # Not RFC 3339: no seconds, a space, an impossible date, a leap second.
        {"payload": 1, "scheduled_at": "2026-11-26 09:00Z"},
        {"payload": 1, "scheduled_at": "2026-11-26T09:00Z"},
        {"payload": 1, "scheduled_at": "2026-02-30T09:00:00Z"},
        {"payload": 1, "scheduled_at": "2026-12-31T23:59:60Z"},
        # Times that cannot be printed back in UTC.
        {"payload": 1, "scheduled_at": "0001-01-01T00:00:00+01:00"},
        {"payload": 1, "scheduled_at": "9999-12-31T23:59:59-01:00"},
    ],
)
def test_invalid_offer_bodies_are_422(client, clean_database, body):
    _assert_problem(client.put("/v1/queues/q/messages/k", json=body), 422)
    assert stored_rows(clean_database.url) == []


@pytest.mark.parametrize(
    "path",
    [
        "/v1/queues/bad!/messages/k",
        "/v1/queues/.dot/messages/k",
        f"/v1/queues/{'q' * 101}/messages/k",
        f"/v1/queues/q/messages/{'k' * 201}",
        "/v1/queues/q/messages/tab%09in",
        "/v1/queues/q/messages/nel%C2%85in",  # U+0085 is a C1 control character
        "/v1/queues/q/messages/",
        # A line feed once matched no route (404), or at the end was dropped ("k").
        "/v1/queues/q/messages/line%0Afeed",
        "/v1/queues/q/messages/k%0A",
        "/v1/queues/q%0A/messages/k",
    ],
)
def test_invalid_names_are_422(client, clean_database, path):
    _assert_problem(client.put(path, json={"payload": 1}), 422)
    assert stored_rows(clean_database.url) == []


@pytest.mark.parametrize("method", ["GET", "DELETE"])
def test_a_cron_entry_name_with_a_line_feed_is_422(client, method):
    _assert_problem(client.request(method, "/v1/queues/q/cron/line%0Afeed"), 422)


def test_malformed_json_is_422(client, clean_database):
    response = client.put(
        "/v1/queues/q/messages/k",
        content=b'{"payload": ',
        headers={"content-type": "application/json"},
    )
    _assert_problem(response, 422)
    assert stored_rows(clean_database.url) == []


def test_the_extreme_printable_times_are_accepted(client):
    assert put(client, "q", "first", 1, scheduled_at="0001-01-01T00:00:00Z").status_code == 201
    last = put(client, "q", "last", 1, scheduled_at="9999-12-31T23:59:59.999Z")
    assert last.json()["scheduled_at"] == "9999-12-31T23:59:59.999Z"
    assert client.get("/v1/queues/q").status_code == 200
    assert (
        client.get("/v1/queues/q/messages/first").json()["scheduled_at"]
        == "0001-01-01T00:00:00.000Z"
    )


def test_a_key_that_is_not_valid_unicode_is_422(client, clean_database):
    response = client.post(
        "/v1/queues/q/batch",
        content=b'{"messages": [{"key": "\\ud800", "payload": 1}]}',
        headers={"content-type": "application/json"},
    )
    _assert_problem(response, 422)
    assert stored_rows(clean_database.url) == []


def test_json_too_deep_for_the_parser_is_422(client, clean_database):
    body = b'{"payload": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    response = client.put(
        "/v1/queues/q/messages/k", content=body, headers={"content-type": "application/json"}
    )
    _assert_problem(response, 422)
    assert stored_rows(clean_database.url) == []


def test_nan_payload_is_422(client, clean_database):
    response = client.put(
        "/v1/queues/q/messages/k",
        content=b'{"payload": NaN}',
        headers={"content-type": "application/json"},
    )
    _assert_problem(response, 422)
    assert stored_rows(clean_database.url) == []


def test_payload_over_the_limit_is_413(clean_database, clock):
    from fastapi.testclient import TestClient

    from app.main import create_app

    settings = clean_database.settings(max_payload_bytes=100)
    with TestClient(create_app(settings, clock=clock)) as client:
        assert put(client, "q", "fits", "x" * 98).status_code == 201  # 100 bytes with quotes
        body = _assert_problem(put(client, "q", "k", "x" * 99), 413)
        assert "101 bytes" in body["detail"]
    assert [row["pKey"] for row in stored_rows(clean_database.url)] == ["fits"]


def test_request_over_the_limit_is_413_with_or_without_content_length(clean_database, clock):
    from fastapi.testclient import TestClient

    from app.main import create_app

    settings = clean_database.settings(max_request_bytes=1000)
    body = b'{"payload": "' + b"x" * 2000 + b'"}'
    with TestClient(create_app(settings, clock=clock)) as client:
        declared = client.put(
            "/v1/queues/q/messages/k", content=body, headers={"content-type": "application/json"}
        )
        assert _assert_problem(declared, 413)["type"] == "urn:hourglass:problem:request-too-large"

        def chunks():
            for start in range(0, len(body), 100):
                yield body[start : start + 100]

        streamed = client.put(
            "/v1/queues/q/messages/k",
            content=chunks(),
            headers={"content-type": "application/json"},
        )
        # One problem type however the body arrives (it was request-entity-too-large here).
        assert _assert_problem(streamed, 413)["type"] == "urn:hourglass:problem:request-too-large"
    assert stored_rows(clean_database.url) == []


@pytest.mark.parametrize(
    "body",
    [
        {"max": 0},
        {"max": 1001},
        {"max": "5"},
        {"max": 2.5},
        {"wait": -1},
        {"wait": 21},
        {"wait": "1"},
        {"lease": 0.5},
        {"lease": 43201},
        {"lease": True},
        {"mx": 1},
    ],
)
def test_invalid_poll_bodies_are_422(client, body):
    put(client, "q", "k", 1)
    _assert_problem(client.post("/v1/queues/q/poll", json=body), 422)
    assert client.get("/v1/queues/q/messages/k").json()["state"] == "ready"


def test_a_whole_number_written_with_a_fraction_is_an_integer(client):
    # JSON Schema's `integer` (what openapi.yaml says `max` is) takes 2.0, and so do
    # some clients' encoders write a whole float: the service takes it as 2.
    put(client, "q", "a", 1)
    put(client, "q", "b", 2)
    put(client, "q", "c", 3)
    answer = client.post(
        "/v1/queues/q/poll", content=b'{"max": 2.0}', headers={"content-type": "application/json"}
    )
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["messages"]) == 2


def test_invalid_extend_and_release_bodies_are_422(client):
    put(client, "q", "k", 1)
    lock = client.post("/v1/queues/q/poll", json={"lease": 30}).json()["lock_id"]
    _assert_problem(client.patch(f"/v1/queues/q/locks/{lock}", json={}), 422)
    _assert_problem(client.patch(f"/v1/queues/q/locks/{lock}", json={"lease": 0}), 422)
    _assert_problem(client.post(f"/v1/queues/q/locks/{lock}/release", json={"delay": -1}), 422)
    assert client.get("/v1/queues/q/messages/k").json()["state"] == "leased"


@pytest.mark.parametrize(
    "lock_id", ["a%00b", "x" * 500, "NOT-A-LOCK", "0B0E6C3E-7F39-4B0C-9A51-2F1D3C4E5A6B"]
)
def test_lock_ids_never_issued_hold_nothing(client, lock_id):
    _assert_problem(client.delete(f"/v1/queues/q/locks/{lock_id}"), 404)
    _assert_problem(client.patch(f"/v1/queues/q/locks/{lock_id}", json={"lease": 5}), 404)
    _assert_problem(client.post(f"/v1/queues/q/locks/{lock_id}/release"), 404)


def test_unknown_route_and_method_are_problems(client):
    _assert_problem(client.get("/v2/nothing"), 404)
    _assert_problem(client.put("/v1/queues/q/poll", json={}), 405)
