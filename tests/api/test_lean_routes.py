"""The hot routes' LeanRoute (app/api/lean.py) against FastAPI's own handling of the same
routes: the same requests get the same answers, byte for byte (a 422's `errors`, their `loc`
and order most of all, and the 413s), without FastAPI's per-request work."""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any
from unittest.mock import patch

import fastapi.routing
import pytest
from fastapi import APIRouter, Query, Request, Response
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from app.api.lean import LeanRoute, lean_route
from app.api.routes import locks, messages
from app.config import Settings
from app.main import create_app
from tests.conftest import FakeClock, truncate_all


@contextmanager
def handled_by_fastapi() -> Iterator[None]:
    """Apps created meanwhile serve the lean routes with FastAPI's own request handler, as
    before them: the same declarations, routes built again with APIRoute's handler (a route's
    handler is built with the route, and again where a router is included)."""
    try:
        with patch.object(LeanRoute, "get_route_handler", APIRoute.get_route_handler):
            importlib.reload(locks)
            importlib.reload(messages)
            yield
    finally:
        importlib.reload(locks)
        importlib.reload(messages)


def test_the_hot_routes_are_lean():
    hot = {
        ("PUT", "/v1/queues/{queue}/messages/{key:path}"),
        ("POST", "/v1/queues/{queue}/messages/{key:path}"),
        ("POST", "/v1/queues/{queue}/batch"),
        ("POST", "/v1/queues/{queue}/poll"),
        ("DELETE", "/v1/queues/{queue}/locks/{lock_id}"),
        ("POST", "/v1/queues/{queue}/locks/{lock_id}/ack"),
        ("PATCH", "/v1/queues/{queue}/locks/{lock_id}"),
        ("POST", "/v1/queues/{queue}/locks/{lock_id}/release"),
    }
    lean = {
        (method, route.path)
        for router in (locks.router, messages.router)
        for route in router.routes
        if isinstance(route, LeanRoute)
        for method in route.methods
    }
    assert lean == hot


JSON = "application/json"
ANY_BODY = [
    None,
    b"",
    b"{",
    b"[]",
    b"null",
    b"1",
    b'"text"',
    b'{"unknown": 1}',
    b"{} trailing",
    b"\xef\xbb\xbf{}",  # a UTF-8 BOM: json.loads takes it, the JSON parser does not
    "{}".encode("utf-16"),
    b'{"payload": "\xff"}',  # not UTF-8
    b'{"payload": ' + b"[" * 300 + b"]" * 300 + b"}",  # deeper than the JSON parser goes
    b'{"payload": ' + b"1" * 5000 + b"}",  # an integer too long to convert
    b'{"payload": "\\ud800"}',  # a lone surrogate
    b'{"payload": NaN}',
]
BODIES: dict[tuple[str, str], list[Any]] = {
    ("PUT", "/v1/queues/q/messages/k"): [
        {"payload": 1},
        {"payload": {"a": [1, 2.5, None, "ü"]}, "delay": 5, "priority": 3.0},
        {"payload": 1, "if_exists": "ignore"},
        {"payload": 1, "delay_seconds": 5},
        {"payload": 1, "delay": -1},
        {"payload": 1, "delay": "60"},
        {"payload": 1, "delay": True},
        {"payload": 1, "delay": 5, "scheduled_at": "2026-11-26T09:00:00Z"},
        {"payload": 1, "scheduled_at": "2026-11-26T09:00:00"},
        {"payload": 1, "scheduled_at": "2026-02-30T09:00:00Z"},
        {"payload": 1, "scheduled_at": "0001-01-01T00:00:00+01:00"},
        {"payload": 1, "if_exists": "replace"},
        {"payload": 1, "priority": 10},
        {"delay": 1},
        b'\xef\xbb\xbf{"payload": 2}',
        b'{"payload": "\\ud800"}',
    ],
    ("POST", "/v1/queues/q/messages/k"): [
        {"payload": 2},
        {"payload": 2, "if_exists": "ignore"},
        {"payload": 2, "delay": 1e12},
    ],
    ("POST", "/v1/queues/q/messages/missing"): [{"payload": 1}],
    ("POST", "/v1/queues/q/batch"): [
        {"messages": [{"key": "a", "payload": 1}, {"key": "a", "payload": 2, "delay": 3}]},
        {"messages": []},
        {"messages": [{"payload": 1}]},
        {"messages": [{"key": "a\nb", "payload": 1}, {"key": "", "payload": 1}]},
        {"messages": [{"key": "a", "payload": 1, "if_exists": "x"}], "if_exists": "y"},
        b'{"messages": [{"key": "\\ud800", "payload": 1}]}',
        {"messages": "a"},
    ],
    ("POST", "/v1/queues/empty/poll"): [
        {},
        {"max": 2.0, "wait": 0, "lease": 30},
        {"max": 0},
        {"max": "5"},
        {"wait": -1, "lease": True},
        {"mx": 1},
        {"ack": {}},
        {"ack": {"lock_id": "x"}},
        {"ack": {"lock_id": "x", "keys": ["a", "a"]}},
        {"ack": {"lock_id": "x", "keys": []}},
        {"ack": {"lock_id": 5, "keys": ["ok", "bad\tkey"]}},
        {"ack": "x"},
    ],
    ("DELETE", "/v1/queues/empty/locks/x"): [None, {"ignored": True}],
    ("POST", "/v1/queues/empty/locks/x/ack"): [
        {"keys": ["a"]},
        {"keys": []},
        {"keys": "a"},
        {"keys": ["a"], "delay": 1},
    ],
    ("PATCH", "/v1/queues/empty/locks/x"): [{"lease": 5}, {"lease": 0}, {}],
    ("POST", "/v1/queues/empty/locks/x/release"): [
        {},
        {"delay": -1},
        {"keys": ["a"], "delay": 5},
        {"keys": []},
    ],
    # Invalid path parameters: with an invalid body too (path errors first), with a body
    # that is no JSON (that error alone), with a valid one.
    ("PUT", "/v1/queues/bad!/messages/bad%0Akey"): [{"payload": 1, "delay": "x"}, b"{", {}],
    ("PUT", "/v1/queues/q/messages/"): [{"payload": 1}],
    ("POST", "/v1/queues/bad!/poll"): [{"max": 0}, None, b"{"],
    ("POST", "/v1/queues/bad!/batch"): [{"messages": []}],
    ("PATCH", "/v1/queues/bad!/locks/x"): [{"lease": 0}],
}
CONTENT_TYPES = [
    JSON,
    "application/json; charset=utf-8",
    "Application/JSON",
    "application/merge-patch+json",
    "text/plain",
    "application/x-www-form-urlencoded",
    None,
]


def _requests() -> Iterator[tuple[str, str, bytes | None, str | None]]:
    for (method, path), bodies in BODIES.items():
        for body in [*bodies, *ANY_BODY]:
            content = body if body is None or isinstance(body, bytes) else json.dumps(body).encode()
            yield method, path, content, JSON
        # Every way a body is or is not taken as JSON, for one body that is fine and one not.
        for content_type in CONTENT_TYPES:
            for content in (json.dumps(bodies[0]).encode(), b"{"):
                yield method, path, content, content_type


def _answers(settings: Settings) -> list[tuple[Any, ...]]:
    answers = []
    with TestClient(create_app(settings, clock=FakeClock())) as client:
        for method, path, content, content_type in _requests():
            headers = {} if content_type is None else {"content-type": content_type}
            answer = client.request(method, path, content=content, headers=headers)
            answers.append(
                (method, path, content, content_type)
                + (answer.status_code, answer.headers.get("content-type"), answer.content)
            )
    return answers


def _solved(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths of the requests FastAPI solves the dependencies of, from now on."""
    solved: list[str] = []
    solve = fastapi.routing.solve_dependencies

    async def counted(*arguments: Any, **keywords: Any) -> Any:
        solved.append(keywords["request"].url.path)
        return await solve(*arguments, **keywords)

    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    return solved


def test_the_same_requests_get_the_same_answers_as_from_fastapi(sqlite_url, monkeypatch):
    settings = Settings(database_url=sqlite_url, auto_migrate=False)
    solved = _solved(monkeypatch)
    truncate_all(sqlite_url)
    lean = _answers(settings)
    assert solved == []
    truncate_all(sqlite_url)
    with handled_by_fastapi():
        before = _answers(settings)
    assert len(solved) > len(before) / 2  # all but the answers before the endpoint (413s, …)
    assert lean == before
    statuses = {answer[4] for answer in lean}
    assert {200, 201, 404, 422} <= statuses and len(lean) > 400


def test_a_body_too_large_is_the_same_413(sqlite_url):
    settings = Settings(database_url=sqlite_url, auto_migrate=False, max_request_bytes=100)
    body = json.dumps({"payload": "x" * 200}).encode()

    def chunks() -> Iterator[bytes]:
        for start in range(0, len(body), 50):
            yield body[start : start + 50]

    def answers() -> list[tuple[int, bytes]]:
        with TestClient(create_app(settings, clock=FakeClock())) as client:
            headers = {"content-type": JSON}
            declared = client.put("/v1/queues/q/messages/k", content=body, headers=headers)
            streamed = client.put("/v1/queues/q/messages/k", content=chunks(), headers=headers)
            return [(one.status_code, one.content) for one in (declared, streamed)]

    lean = answers()
    with handled_by_fastapi():
        assert answers() == lean
    assert [status for status, _ in lean] == [413, 413]


def test_fastapi_solves_no_dependency_of_a_hot_route(sqlite_url, monkeypatch):
    solved = _solved(monkeypatch)
    truncate_all(sqlite_url)
    settings = Settings(database_url=sqlite_url, auto_migrate=False)
    with TestClient(create_app(settings, clock=FakeClock())) as client:
        assert client.put("/v1/queues/q/messages/k", json={"payload": 1}).status_code == 201
        lock = client.post("/v1/queues/q/poll", json={}).json()["lock_id"]
        assert client.patch(f"/v1/queues/q/locks/{lock}", json={"lease": 9}).status_code == 200
        assert client.delete(f"/v1/queues/q/locks/{lock}").status_code == 204
        assert solved == []
        assert client.get("/v1/queues/q/messages/k").status_code == 404  # not a hot route
    assert solved == ["/v1/queues/q/messages/k"]


def test_a_lean_route_takes_nothing_it_does_not_handle():
    router = APIRouter()

    async def listed(request: Request, limit: Annotated[int, Query()] = 1) -> Response:
        return Response()

    with pytest.raises(TypeError, match="path parameters, at most one body and the Request"):
        lean_route(router, "GET", "/listed")(listed)


# What the JSON-mode validation takes, the Python mode (FastAPI's: json.loads, then the
# model) takes too, with the same value: the lean route's answer to an accepted body cannot
# differ from FastAPI's.
HOT_BODIES = [
    route.body_field.field_info.annotation
    for router in (locks.router, messages.router)
    for route in router.routes
    if isinstance(route, LeanRoute) and route.body_field is not None
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
numbers = st.integers(min_value=-5, max_value=50_000) | st.floats(min_value=-5, max_value=5e4)
keys = st.text(min_size=1, max_size=5)
times = st.sampled_from(["2026-11-26T09:00:00Z", "2026-11-26T09:00:00.5+02:00", "nope"])
FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "payload": json_values,
    "delay": numbers,
    "scheduled_at": times,
    "priority": st.integers(min_value=0, max_value=10) | st.sampled_from([3.0, 2.5]),
    "if_exists": st.sampled_from(["update", "ignore", "other"]),
    "key": keys,
    "keys": st.lists(keys, min_size=1, max_size=3),
    "max": st.integers(min_value=0, max_value=1001) | st.sampled_from([2.0, 2.5]),
    "wait": numbers,
    "lease": numbers,
    "lock_id": st.text(max_size=5),
}
FIELDS["messages"] = st.lists(
    st.fixed_dictionaries(
        {"key": keys, "payload": json_values},
        optional={name: FIELDS[name] for name in ("delay", "scheduled_at", "if_exists")},
    ),
    min_size=1,
    max_size=3,
)
FIELDS["ack"] = st.fixed_dictionaries(
    {"lock_id": FIELDS["lock_id"]}, optional={"keys": FIELDS["keys"]}
)


def _bodies(annotation: Any) -> st.SearchStrategy[Any]:
    """Bodies of the model's own fields (most valid, some not), and any JSON now and then."""
    model = next(part for part in getattr(annotation, "__args__", (annotation,)) if part)
    names = [name for name in model.model_fields if name in FIELDS]
    fitting = st.fixed_dictionaries({}, optional={name: FIELDS[name] for name in names})
    return fitting | json_values


@pytest.mark.parametrize("annotation", HOT_BODIES, ids=repr)
@settings(
    max_examples=200,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(data=st.data())
def test_json_mode_takes_only_what_fastapi_takes_and_as_it_does(annotation, data):
    body = data.draw(_bodies(annotation))
    raw = json.dumps(body, ensure_ascii=False).encode()
    adapter = TypeAdapter(annotation)
    try:
        lean = adapter.validate_json(raw)
    except ValidationError:
        return  # FastAPI's way decides, and answers
    assert adapter.validate_python(json.loads(raw), from_attributes=True) == lean
