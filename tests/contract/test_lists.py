"""Lists of a queue's messages and of its history (decision 13), on every database."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.domain.pages import DuePosition, KeyPosition, encode_cursor
from app.main import create_app
from tests.conftest import START_MS
from tests.support.helpers import at, poll, put


def _raw_cursor(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def page(client: TestClient, queue: str = "q", **query: Any) -> dict[str, Any]:
    response = client.get(f"/v1/queues/{queue}/messages", params=query)
    assert response.status_code == 200, response.text
    return response.json()


def keys(answer: dict[str, Any]) -> list[str]:
    return [message["key"] for message in answer["messages"]]


def walk(client: TestClient, queue: str = "q", **query: Any) -> list[list[str]]:
    """Every page of a list, following `next`."""
    pages, cursor = [], None
    while True:
        answer = page(client, queue, **query, **({"cursor": cursor} if cursor else {}))
        pages.append(keys(answer))
        cursor = answer["next"]
        if cursor is None:
            return pages


def test_an_empty_queue_lists_nothing(client):
    assert page(client) == {"messages": [], "next": None}
    assert client.get("/v1/queues/q/history").json() == {"entries": [], "next": None}


def test_messages_come_by_due_time_then_as_offered_and_look_as_one_read_by_key(client, clock):
    put(client, "q", "later", {"n": 1}, delay=60)
    put(client, "q", "b", [1, "two"])
    put(client, "q", "a", None)  # due in the same millisecond as "b", offered after it
    put(client, "q", "earliest", "x", scheduled_at=at(START_MS - 1000))
    answer = page(client)
    assert keys(answer) == ["earliest", "b", "a", "later"]
    assert answer["next"] is None
    for listed in answer["messages"]:
        assert listed == client.get(f"/v1/queues/q/messages/{listed['key']}").json()


def test_pages_walk_past_messages_due_before_1970(client, clock):
    # Due times before the epoch are negative milliseconds; the cursor after one of them
    # must read back like any other (it was once a 404).
    put(client, "q", "first", 1, scheduled_at="0001-01-01T00:00:00Z")
    put(client, "q", "second", 2, scheduled_at="1969-07-20T20:17:40Z")
    put(client, "q", "third", 3, scheduled_at="1970-01-01T00:00:00Z")
    clock.advance(0.001)  # after the offers: a walk leaves out what moved as it began
    assert walk(client, limit=1) == [["first"], ["second"], ["third"]]


def test_pages_follow_one_another_without_repeats(client, clock):
    for number in range(23):
        put(client, "q", f"k{number:02}", number, delay=number % 5)  # many due together
    # A walk leaves out of its later pages what was offered or polled in the millisecond
    # it began, or after (app/domain/pages.py: DuePosition).
    clock.advance(0.001)
    pages = walk(client, limit=5)
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    listed = [key for p in pages for key in p]
    assert sorted(listed) == [f"k{number:02}" for number in range(23)]
    assert listed == keys(page(client, limit=500))  # the same order as one page


def test_a_page_of_the_limit_exactly_says_there_may_be_more_only_when_there_is(client):
    for number in range(4):
        put(client, "q", f"k{number}", number)
    assert page(client, limit=4)["next"] is None
    assert page(client, limit=3)["next"] is not None


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ("all", ["leased-expired", "ready", "leased", "scheduled"]),
        ("ready", ["leased-expired", "ready"]),
        ("scheduled", ["scheduled"]),
        ("leased", ["leased"]),
    ],
)
def test_the_state_filter(client, clock, state, expected):
    put(client, "q", "leased-expired", 1, scheduled_at=at(START_MS - 3000))
    poll(client, "q", lease=1)  # its lease ends after 1 s: ready again
    put(client, "q", "leased", 1, scheduled_at=at(START_MS - 2000))
    clock.advance(1)
    poll(client, "q", lease=30)  # takes "leased" only: the other is still leased
    put(client, "q", "ready", 1)
    put(client, "q", "scheduled", 1, delay=40)
    clock.advance(1)  # "leased-expired" is due again
    answer = page(client, state=state)
    assert keys(answer) == expected
    assert {message["state"] for message in answer["messages"]} <= {state, "all"} | (
        {"ready", "leased", "scheduled"} if state == "all" else set()
    )


def test_a_prefix_lists_its_keys_in_key_order_with_percent_and_underscore_literal(client):
    for key in ["a_b", "axb", "a_c", "a%b", "aXb", "a", "b_b", "a_", "a_b/c d"]:
        put(client, "q", key, 1)
    put(client, "other", "a_z", 1)
    assert keys(page(client, prefix="a_")) == ["a_", "a_b", "a_b/c d", "a_c"]
    assert keys(page(client, prefix="a_b")) == ["a_b", "a_b/c d"]
    assert keys(page(client, prefix="a%")) == ["a%b"]
    assert keys(page(client, prefix="ax")) == ["axb"]
    assert keys(page(client, prefix="zzz")) == []
    # Byte order: "X" (0x58) before "_" (0x5f) before "x" (0x78).
    assert keys(page(client, prefix="a")) == [
        "a",
        "a%b",
        "aXb",
        "a_",
        "a_b",
        "a_b/c d",
        "a_c",
        "axb",
    ]


def test_a_walk_by_prefix_through_the_longest_keys(client):
    longest = ["😀" * 199 + character for character in "abc"]
    for key in longest:
        assert put(client, "q", key, 1).status_code == 201
    assert walk(client, prefix="😀", limit=1) == [[key] for key in longest]


def test_prefix_pages_follow_key_order(client):
    for number in range(12):
        put(client, "q", f"user-{number:03}", number, delay=12 - number)  # due order reversed
    put(client, "q", "userz", 1)
    pages = walk(client, prefix="user-", limit=5)  # keys do not move: no rule of time
    assert pages == [
        [f"user-{number:03}" for number in range(5)],
        [f"user-{number:03}" for number in range(5, 10)],
        ["user-010", "user-011"],
    ]


def test_keys_beyond_the_basic_plane_and_the_last_code_point_list_by_prefix(client):
    for key in ["é", "éa", "😀", "😀x", "\U0010ffff", "\U0010ffffa", "f"]:
        assert put(client, "q", key, 1).status_code == 201
    assert keys(page(client, prefix="é")) == ["é", "éa"]
    assert keys(page(client, prefix="😀")) == ["😀", "😀x"]
    assert keys(page(client, prefix="\U0010ffff")) == ["\U0010ffff", "\U0010ffffa"]


def test_a_state_filter_with_a_prefix(client, clock):
    put(client, "q", "job-1", 1)
    put(client, "q", "job-2", 1, delay=10)
    put(client, "q", "other", 1)
    assert keys(page(client, prefix="job-", state="scheduled")) == ["job-2"]
    assert keys(page(client, prefix="job-", state="ready")) == ["job-1"]


def test_a_page_stops_before_its_payloads_pass_the_poll_bound(clean_database, clock):
    settings = clean_database.settings(max_poll_bytes=100_000)
    with TestClient(create_app(settings, clock=clock)) as client:
        big = "x" * 40_000
        for number in range(5):
            put(client, "q", f"k{number}", big)
        clock.advance(0.001)
        pages = walk(client, limit=500)
        assert [len(p) for p in pages] == [2, 2, 1]
        assert page(client, limit=500)["messages"][0]["payload"] == big


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 0},
        {"limit": 501},
        {"limit": "ten"},
        {"state": "dead"},
        {"prefix": "a\x01"},
        {"prefix": "x" * 201},
        # Not a cursor's shape (base64url): invalid input.
        {"cursor": "not a cursor"},
        {"cursor": ""},
        {"cursor": "x" * 2049},
    ],
)
def test_bad_list_requests_are_422_problems(client, query):
    response = client.get("/v1/queues/q/messages", params=query)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"


@pytest.mark.parametrize(
    "query",
    [
        {"cursor": "W10"},  # "[]"
        {"cursor": "x" * 2048},
        {"cursor": encode_cursor(KeyPosition("k"))},  # a prefix list's, without a prefix
        {"cursor": encode_cursor(DuePosition(1, 2, 3)), "prefix": "k"},
        {"cursor": _raw_cursor('["k","\\ud800"]'), "prefix": "k"},  # no character
        {"cursor": encode_cursor(KeyPosition("a\x00")), "prefix": "a"},
        {"cursor": encode_cursor(KeyPosition("")), "prefix": "a"},
        {"cursor": encode_cursor(DuePosition(2**63, 1, 1))},
        {"cursor": encode_cursor(DuePosition(1, -1, 1))},
    ],
)
def test_a_cursor_no_list_handed_out_names_no_page(client, query):
    # Any base64url string is a cursor's shape (openapi.yaml): one this kind of list did
    # not hand out is an identifier of nothing, as an unknown key is.
    response = client.get("/v1/queues/q/messages", params=query)
    assert response.status_code == 404, response.text
    assert response.json()["type"] == "urn:hourglass:problem:cursor-not-found"


@pytest.mark.parametrize(
    "query",
    [
        {"limit": 0},
        {"outcome": "lost"},
        {"key": ""},
        {"cursor": "%%%"},
    ],
)
def test_bad_history_requests_are_422_problems(client, query):
    response = client.get("/v1/queues/q/history", params=query)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"


def test_a_history_cursor_no_history_handed_out_names_no_page(client):
    response = client.get(
        "/v1/queues/q/history", params={"cursor": encode_cursor(KeyPosition("k"))}
    )
    assert response.status_code == 404, response.text
    assert response.headers["content-type"] == "application/problem+json"


def _finish(client: TestClient, clock) -> None:
    """Messages leave `q` every way there is, one millisecond apart."""
    put(client, "q", "acked", {"a": 1}, scheduled_at=at(START_MS - 500))
    clock.advance(0.001)
    lock = poll(client, "q", lease=30)["lock_id"]
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
    clock.advance(0.001)
    put(client, "q", "deleted", 1, delay=5)
    assert client.delete("/v1/queues/q/messages/deleted").status_code == 204
    clock.advance(0.001)
    put(client, "q", "acked", {"a": 2})  # the same key again
    clock.advance(0.001)
    lock = poll(client, "q", lease=30)["lock_id"]
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
    put(client, "other", "acked", 1)
    assert client.delete("/v1/queues/other", params={"confirm": "other"}).status_code == 200


def test_history_lists_what_left_the_queue_newest_first(client, clock):
    _finish(client, clock)
    answer = client.get("/v1/queues/q/history").json()
    assert answer["next"] is None
    assert [(entry["key"], entry["outcome"]) for entry in answer["entries"]] == [
        ("acked", "acknowledged"),
        ("deleted", "dropped"),
        ("acked", "acknowledged"),
    ]
    first = answer["entries"][-1]
    assert first == {
        "key": "acked",
        "outcome": "acknowledged",
        "scheduled_at": at(START_MS - 500),
        "created_at": at(START_MS),
        "first_delivered_at": at(START_MS + 1),
        "last_delivered_at": at(START_MS + 1),
        "deliveries": 1,
        "finished_at": at(START_MS + 1),
    }


def test_history_filters_and_pages(client, clock):
    _finish(client, clock)
    by_key = client.get("/v1/queues/q/history", params={"key": "acked"}).json()["entries"]
    assert [entry["finished_at"] for entry in by_key] == [at(START_MS + 4), at(START_MS + 1)]
    dropped = client.get("/v1/queues/q/history", params={"outcome": "dropped"}).json()
    assert [entry["key"] for entry in dropped["entries"]] == ["deleted"]
    seen, cursor = [], None
    while True:
        query = {"limit": 1, **({"cursor": cursor} if cursor else {})}
        answer = client.get("/v1/queues/q/history", params=query).json()
        seen += [(entry["key"], entry["finished_at"]) for entry in answer["entries"]]
        if (cursor := answer["next"]) is None:
            break
    assert seen == [
        ("acked", at(START_MS + 4)),
        ("deleted", at(START_MS + 2)),
        ("acked", at(START_MS + 1)),
    ]


def test_history_rows_in_the_same_millisecond_page_by_id(client, clock):
    for number in range(7):
        put(client, "q", f"k{number}", number)
    lock = poll(client, "q", max=7)["lock_id"]
    assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204  # one instant
    seen, cursor = [], None
    while True:
        query = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        answer = client.get("/v1/queues/q/history", params=query).json()
        seen += [entry["key"] for entry in answer["entries"]]
        if (cursor := answer["next"]) is None:
            break
    assert sorted(seen) == [f"k{number}" for number in range(7)]


@pytest.fixture
def scoped(clean_database, clock) -> Iterator[TestClient]:
    settings = clean_database.settings(api_tokens="admin-token,team-token=team-*")
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client


def test_a_scoped_token_lists_only_its_queues(scoped):
    admin = {"Authorization": "Bearer admin-token"}
    team = {"Authorization": "Bearer team-token"}
    for queue in ("team-a", "billing"):
        response = scoped.put(f"/v1/queues/{queue}/messages/k", json={"payload": 1}, headers=admin)
        assert response.status_code == 201
    assert scoped.get("/v1/queues/team-a/messages", headers=team).status_code == 200
    for path in ("/v1/queues/billing/messages", "/v1/queues/billing/history"):
        assert scoped.get(path, headers=team).status_code == 403
        assert scoped.get(path).status_code == 401


def test_a_walk_by_due_time_leaves_out_what_moved_since_it_began(client, clock):
    """A message polled or updated during a walk moves later in due order: listed
    already, it would come again. Later pages leave it out; the rest stay listed."""
    for number in range(6):
        put(client, "q", f"k{number}", number, scheduled_at=at(START_MS - 1000 + number))
    clock.advance(0.001)
    first = page(client, limit=2)
    assert keys(first) == ["k0", "k1"]
    clock.advance(0.001)
    assert keys(poll(client, "q", max=1, lease=600)) == ["k0"]  # now due last
    put(client, "q", "k1", "updated", delay=300)  # moved later too
    put(client, "q", "k3", "updated", scheduled_at=at(START_MS - 5000))  # moved earlier
    put(client, "q", "new", 1)  # offered during the walk
    rest = walk_from(client, first["next"], limit=2)
    assert rest == ["k2", "k4", "k5"]


def walk_from(client: TestClient, cursor: str, **query: Any) -> list[str]:
    listed: list[str] = []
    while cursor:
        answer = page(client, **query, cursor=cursor)
        listed += keys(answer)
        cursor = answer["next"]
    return listed
