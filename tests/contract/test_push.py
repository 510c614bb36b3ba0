"""Push delivery (decision 16), on every database: the `push` setting and its 422s, and the
dispatcher against a real HTTP endpoint on 127.0.0.1 (tests/support/push_endpoint.py): the body
and headers of each request, the signature, acknowledgement on 2xx, releases with the
retry delay on anything else (the fake clock gives the due times exactly), dead letters,
one queue's hanging endpoint not delaying another's, the answer's size limit, the bound
on requests in flight, and stopping.

Waits are on events with generous bounds: the endpoint's requests, and the dispatcher's
`settled_listeners`, told of each push once its message is acknowledged or released.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from fastapi.testclient import TestClient

from app import __version__
from app.api.edge import current_request_id
from app.domain.formats import parse_timestamp
from app.main import create_app
from app.push.dispatcher import LEASE_MARGIN_MS
from app.push.ports import PushResult
from app.push.sender import RESPONSE_BODY_LIMIT
from tests.conftest import FakeClock
from tests.support.helpers import at, history_rows, poll, put, settings_rows, stored_rows
from tests.support.push_endpoint import Answer, Endpoint, Received, refused_url, running_endpoint

SECRETS = ("first-secret", "second-secret")
PUSH_PAGE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "push.md"


class Settled:
    """The pushes the dispatcher settled, as (queue, key, result), in order."""

    def __init__(self) -> None:
        self.pushes: list[tuple[str, str, PushResult]] = []
        self.changed = threading.Condition()

    def __call__(self, queue: str, key: str, result: PushResult) -> None:
        with self.changed:
            self.pushes.append((queue, key, result))
            self.changed.notify_all()

    def wait_for(self, count: int, timeout: float = 10.0) -> list[tuple[str, str, PushResult]]:
        with self.changed:
            done = self.changed.wait_for(lambda: len(self.pushes) >= count, timeout)
            assert done, f"{len(self.pushes)} pushes settled, expected {count}: {self.pushes}"
            return list(self.pushes[:count])


class Service:
    """The app in process (TestClient) with the fake clock, and what it pushed."""

    def __init__(self, client: TestClient, clock: FakeClock, url: str) -> None:
        self.client = client
        self.clock = clock
        self.url = url
        self.settled = Settled()
        self.dispatcher = client.app.state.push_dispatcher  # type: ignore[attr-defined]
        self.dispatcher.settled_listeners.append(self.settled)

    def configure(self, queue: str = "q", **fields: Any) -> dict[str, Any]:
        response = self.client.put(f"/v1/queues/{queue}/settings", json=fields)
        assert response.status_code == 200, response.text
        return response.json()

    def push_to(self, url: str, queue: str = "q", **push: Any) -> dict[str, Any]:
        return self.configure(queue, push={"url": url, **push})

    def message(self, key: str, queue: str = "q") -> dict[str, Any]:
        response = self.client.get(f"/v1/queues/{queue}/messages/{key}")
        assert response.status_code == 200, response.text
        return response.json()

    def due_in_ms(self, key: str, queue: str = "q") -> int:
        """How long after now (the fake clock's) the message is due again."""
        message = self.message(key, queue)
        assert message["state"] == "scheduled", message
        return parse_timestamp(message["scheduled_at"]) - self.clock.now

    def refresh(self) -> None:
        """Have the dispatcher read which queues push now (as it does every few seconds)."""
        self.client.portal.call(self.dispatcher.refresh)  # type: ignore[union-attr]


@pytest.fixture
def endpoint() -> Iterator[Endpoint]:
    with running_endpoint() as endpoint:
        yield endpoint


@pytest.fixture(scope="module")
def refused() -> str:
    return refused_url()


@contextmanager
def service_for(database, clock: FakeClock, url: str, **overrides: Any) -> Iterator[Service]:
    """The app; push urls must start with `url` unless `push_allowed` says otherwise."""
    settings = database.settings(
        push_allowed=overrides.pop("push_allowed", url),
        push_secrets=overrides.pop("push_secrets", ",".join(SECRETS)),
        # The dispatcher notices the fake clock's moves within this (it wakes at once on
        # offers and releases, and at due times on the real clock).
        poll_recheck_seconds=0.05,
        **overrides,
    )
    with TestClient(create_app(settings, clock=clock)) as client:
        yield Service(client, clock, url)


@pytest.fixture
def service(clean_database, clock, endpoint, refused) -> Iterator[Service]:
    allowed = f"{endpoint.prefix}/,{refused}"
    with service_for(clean_database, clock, endpoint.prefix, push_allowed=allowed) as service:
        yield service


# -- the setting --------------------------------------------------------------------


def test_without_push_allowed_any_push_is_refused_and_nothing_written(clean_database, clock):
    with service_for(clean_database, clock, "", push_allowed="") as service:
        response = service.client.put(
            "/v1/queues/q/settings", json={"push": {"url": "http://127.0.0.1:9/hook"}}
        )
        assert response.status_code == 422
        assert response.headers["content-type"] == "application/problem+json"
        assert "HOURGLASS_PUSH_ALLOWED" in response.json()["detail"]
        assert settings_rows(clean_database.url) == []
        # null is no push, and fine
        assert service.configure(push=None)["push"] is None


STRICT = "http://a.example,https://b.example/hooks/"


@pytest.mark.parametrize(
    "url",
    [
        "http://a.example.evil.com/x",  # a prefix is not a host's start
        "http://a.example:8080/x",  # nor another port
        "http://a.exampleevil/",
        "https://a.example/x",  # another scheme
        "https://b.example/hooksevil",
        "https://b.example/hooks/../admin",  # httpx would send /admin
        "https://b.example/hooks/%2E%2E/admin",
        "http://a.example\\@evil.com/",
        "http://a.example/a b",
        "",
    ],
)
def test_a_url_outside_the_prefixes_is_refused(clean_database, clock, url):
    with service_for(clean_database, clock, "", push_allowed=STRICT) as service:
        before = service.configure(max_deliveries=3)
        response = service.client.put(
            "/v1/queues/q/settings", json={"push": {"url": url}, "max_deliveries": 5}
        )
        assert response.status_code == 422, response.text
        assert response.headers["content-type"] == "application/problem+json"
        assert service.client.get("/v1/queues/q/settings").json() == before
        assert settings_rows(clean_database.url)[0]["pushUrl"] is None


@pytest.mark.parametrize(
    "url",
    [
        "http://u:p@c.example/",  # userinfo
        "http://u@c.example/",
        "ftp://c.example/x",
        "file:///etc/passwd",
        "http:///x",  # no host
        "http://c.example:99999/",
    ],
)
def test_userinfo_and_other_schemes_are_refused_whatever_the_prefixes(clean_database, clock, url):
    # As permissive as the setting may be (it refuses ftp:// and other prefixes at start).
    permissive = "http://,https://"
    with service_for(clean_database, clock, "", push_allowed=permissive) as service:
        response = service.client.put("/v1/queues/q/settings", json={"push": {"url": url}})
        assert response.status_code == 422, response.text
        assert settings_rows(clean_database.url) == []


@pytest.mark.parametrize(
    "push",
    [
        {"url": "http://a.example/x", "timeout": 0},
        {"url": "http://a.example/x", "timeout": -1},
        {"url": "http://a.example/x", "timeout": 300.5},
        {"url": "http://a.example/x", "timeout": "10"},
        {"url": "http://a.example/x", "concurrency": 0},
        {"url": "http://a.example/x", "concurrency": 101},
        {"url": "http://a.example/x", "concurrency": 2.5},
        {"url": "http://a.example/x", "concurrency": "4"},
        {"url": "http://a.example/x", "retries": 3},
        {"timeout": 5},
        "http://a.example/x",
    ],
)
def test_bad_timeouts_and_concurrencies_are_refused(clean_database, clock, push):
    with service_for(clean_database, clock, "", push_allowed=STRICT) as service:
        response = service.client.put("/v1/queues/q/settings", json={"push": push})
        assert response.status_code == 422, response.text
        assert settings_rows(clean_database.url) == []


@pytest.mark.parametrize(
    "url",
    [
        "http://a.example",
        "http://a.example/",
        "http://a.example/hook/q",
        "http://a.example?queue=q",
        "https://b.example/hooks/",
        "https://b.example/hooks/q1?x=%2F",
    ],
)
def test_an_admitted_url_is_stored_with_the_defaults_filled_in(clean_database, clock, url):
    with service_for(clean_database, clock, "", push_allowed=STRICT) as service:
        expected = {"url": url, "timeout": 10.0, "concurrency": 4}
        assert service.push_to(url)["push"] == expected
        assert service.client.get("/v1/queues/q/settings").json()["push"] == expected
        assert service.push_to(url, timeout=300, concurrency=100)["push"] == {
            "url": url,
            "timeout": 300.0,
            "concurrency": 100,
        }
        assert service.push_to(url, timeout=0.25, concurrency=1)["push"]["timeout"] == 0.25
        # A PUT replaces the settings whole: one without push removes it.
        assert service.configure(max_deliveries=2)["push"] is None
        assert service.client.get("/v1/queues/q/settings").json()["push"] is None


# -- requests -------------------------------------------------------------------------


def test_a_due_message_is_posted_as_a_poll_shows_it_signed_and_acknowledged(
    service, endpoint, clean_database, clock
):
    service.push_to(endpoint.url(), timeout=2)
    key = "order/42 é"
    payload = {"text": "<b>hello</b>", "n": [1, 2.5, None]}
    assert put(service.client, "q", key, payload).status_code == 201
    (request,) = endpoint.wait_for_requests(1)
    assert service.settled.wait_for(1) == [("q", key, PushResult.SUCCESS)]

    assert request.path == "/hook"
    body = json.loads(request.body)
    lease_ends = clock.now + 2_000 + LEASE_MARGIN_MS
    assert body == {
        "queue": "q",
        "key": key,
        "payload": payload,
        "scheduled_at": at(lease_ends),
        "scheduled_at_initially": at(clock.now),
        "created_at": at(clock.now),
        "state": "leased",
        "deliveries": 1,
        "dead_lettered_from": None,
        "priority": 0,
        "group": None,
        "expires_at": None,
        "expired": False,
        "trace": None,
        "delivery": "first",
        "lease_expires_at": at(lease_ends),
    }
    # The very shape (fields and their order) of a message in a poll's answer.
    put(service.client, "polled", "k", payload)
    (polled,) = poll(service.client, "polled", lease=7)["messages"]
    assert list(body) == list(polled)
    assert json.dumps(payload, separators=(",", ":")).encode() in request.body

    headers = request.headers
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == f"hourglass/{__version__}"
    assert headers["hourglass-queue"] == "q"
    assert headers["hourglass-key"] == "order%2F42%20%C3%A9"
    assert unquote(headers["hourglass-key"]) == key
    assert headers["hourglass-delivery"] == "1"
    assert re.fullmatch(r"[0-9a-f-]{36}", headers["hourglass-lock"])
    t, *signatures = headers["hourglass-signature"].split(",")
    assert t == f"t={clock.now // 1000}"
    assert len(signatures) == len(SECRETS)

    # Acknowledged on its lock: gone, with its history row.
    assert service.client.get(f"/v1/queues/q/messages/{key}").status_code == 404
    (history,) = [row for row in history_rows(clean_database.url) if row["queue"] == "q"]
    assert (history["key"], history["outcome"], history["deliveries"]) == (
        key,
        "acknowledged",
        1,
    )
    metrics = service.client.get("/metrics").text
    assert 'hourglass_push_requests_total{queue="q",result="2xx"} 1.0' in metrics
    assert 'hourglass_push_duration_seconds_count{queue="q"} 1.0' in metrics
    assert 'hourglass_messages_acknowledged_total{queue="q"} 1.0' in metrics


def documented_verifier() -> Any:
    """The signature verifier the push page documents (its `verify.py`), run as written."""
    code = re.search(r"```python\n(# verify\.py\n.*?)```", PUSH_PAGE.read_text(), re.DOTALL)
    assert code is not None, "docs/guide/push.md lost its verify.py"
    namespace: dict[str, Any] = {}
    exec(compile(code.group(1), str(PUSH_PAGE), "exec"), namespace)  # noqa: S102 - the page's code
    return namespace["verify_signature"]


def test_the_documented_verifier_checks_real_pushes_with_each_secret(service, endpoint, clock):
    verify_signature = documented_verifier()
    service.push_to(endpoint.url())
    put(service.client, "q", "k", {"a": "ü"})
    (request,) = endpoint.wait_for_requests(1)
    header, body = request.headers["hourglass-signature"], request.body
    now = clock.now / 1000
    for secret in SECRETS:  # either secret verifies: rotation
        assert verify_signature(header, body, secret, now=now)
    assert not verify_signature(header, body, "another-secret", now=now)
    assert not verify_signature(header, body + b" ", SECRETS[0], now=now)
    assert not verify_signature(header, body.replace(b"\xc3\xbc", b"u"), SECRETS[0], now=now)
    # Outside the tolerance on t, either way.
    assert not verify_signature(header, body, SECRETS[0], now=now + 301)
    assert not verify_signature(header, body, SECRETS[0], now=now - 301)
    assert verify_signature(header, body, SECRETS[0], now=now + 299)
    # A header whose t was changed no longer verifies.
    forged = header.replace(f"t={int(now)}", f"t={int(now) + 60}")
    assert not verify_signature(forged, body, SECRETS[0], now=now + 60)


def test_without_secrets_no_signature_is_sent(clean_database, clock, endpoint, caplog):
    caplog.set_level(logging.WARNING, logger="app.push.dispatcher")
    with service_for(clean_database, clock, endpoint.prefix, push_secrets="") as service:
        service.push_to(endpoint.url())
        put(service.client, "q", "k", 1)
        (request,) = endpoint.wait_for_requests(1)
        assert "hourglass-signature" not in request.headers
        service.settled.wait_for(1)
    assert "HOURGLASS_PUSH_SECRETS unset" in caplog.text


def test_a_traced_message_is_pushed_with_its_trace_context_headers(service, endpoint):
    # The offer's traceparent and tracestate go out as the push's own headers (and in its
    # body, as the message's `trace`); a message offered without them is pushed without.
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    service.push_to(endpoint.url())
    offers = {
        "both": {"traceparent": parent, "tracestate": "rojo=00f067aa0ba902b7"},
        "parent-only": {"traceparent": parent},
        "none": {},
        "malformed": {"traceparent": "00-nope", "tracestate": "rojo=1"},
    }
    for key, headers in offers.items():
        response = service.client.put(
            f"/v1/queues/q/messages/{key}", json={"payload": key}, headers=headers
        )
        assert response.status_code == 201, response.text
    arrived = {
        unquote(request.headers["hourglass-key"]): request
        for request in endpoint.wait_for_requests(len(offers))
    }
    sent = {
        key: (request.headers.get("traceparent"), request.headers.get("tracestate"))
        for key, request in arrived.items()
    }
    assert sent == {
        "both": (parent, "rojo=00f067aa0ba902b7"),
        "parent-only": (parent, None),
        "none": (None, None),
        "malformed": (None, None),
    }
    assert json.loads(arrived["both"].body)["trace"] == offers["both"]
    assert json.loads(arrived["none"].body)["trace"] is None
    service.settled.wait_for(len(offers))


def answer_found(received: Received) -> Answer:
    return Answer(302, headers={"Location": received.path + "/elsewhere"})


FAILURES = {
    "500": (lambda received: Answer(500, b"oops"), PushResult.SERVER_ERROR),
    "404": (lambda received: Answer(404), PushResult.CLIENT_ERROR),
    "302": (answer_found, PushResult.REDIRECT),
    "timeout": (lambda received: Answer(hold=True), PushResult.TIMEOUT),
    "refused": (None, PushResult.ERROR),
}


@pytest.mark.parametrize("failure", list(FAILURES))
def test_a_failed_push_releases_the_message_with_the_default_retry_delay(
    service, endpoint, clock, refused, failure
):
    answer, result = FAILURES[failure]
    url = refused if answer is None else endpoint.url()
    if answer is not None:
        endpoint.answer = answer
    service.push_to(url, timeout=0.5)
    put(service.client, "q", "k", 1)
    assert service.settled.wait_for(1) == [("q", "k", result)]
    # 1 s after the first delivery, doubling: 2 s after the second.
    assert service.due_in_ms("k") == 1_000
    assert service.message("k")["deliveries"] == 1
    clock.advance(1)
    assert service.settled.wait_for(2)[1] == ("q", "k", result)
    assert service.due_in_ms("k") == 2_000
    assert service.message("k")["deliveries"] == 2
    if answer is not None:
        arrived = endpoint.wait_for_requests(2)
        assert [request.headers["hourglass-delivery"] for request in arrived] == ["1", "2"]
        # Redirects are never followed: only the push URL itself was asked.
        assert [request.path for request in endpoint.requests] == ["/hook", "/hook"]
    metrics = service.client.get("/metrics").text
    assert f'hourglass_push_requests_total{{queue="q",result="{result.value}"}} 2.0' in metrics


def test_the_queue_retry_setting_gives_the_delay_of_a_failed_push(service, endpoint, clock):
    endpoint.answer = lambda received: Answer(503)
    service.configure(
        push={"url": endpoint.url()}, retry={"initial_delay": 7, "max_delay": 10, "multiplier": 3}
    )
    put(service.client, "q", "k", 1)
    service.settled.wait_for(1)
    assert service.due_in_ms("k") == 7_000
    clock.advance(7)
    service.settled.wait_for(2)
    assert service.due_in_ms("k") == 10_000  # min(10, 7 × 3)


def test_max_deliveries_dead_letters_a_message_whose_pushes_keep_failing(
    service, endpoint, clock, clean_database
):
    endpoint.answer = lambda received: Answer(500)
    service.configure(push={"url": endpoint.url()}, max_deliveries=2)
    put(service.client, "q", "k", {"x": 1})
    service.settled.wait_for(1)
    clock.advance(1)
    service.settled.wait_for(2)
    clock.advance(2)
    # Due again after its last delivery: the dispatcher's next claim moves it.
    (dead,) = poll(service.client, "q.dead", wait=10)["messages"]
    assert (dead["key"], dead["payload"], dead["dead_lettered_from"]) == ("k", {"x": 1}, "q")
    assert len(endpoint.requests) == 2
    assert [(row["queue"], row["outcome"]) for row in history_rows(clean_database.url)] == [
        ("q", "dead_lettered")
    ]


def test_a_hanging_endpoint_does_not_delay_another_queues_pushes(service, endpoint):
    endpoint.answer = lambda received: Answer(hold=received.path == "/a")
    service.push_to(endpoint.url("/a"), queue="a", timeout=30, concurrency=2)
    service.push_to(endpoint.url("/b"), queue="b", timeout=30, concurrency=2)
    for number in range(4):
        put(service.client, "a", f"a{number}", number)
    endpoint.wait_until(lambda e: e.in_flight == 2)  # A's slots are full, and held
    for number in range(6):
        put(service.client, "b", f"b{number}", number)
    settled = service.settled.wait_for(6)
    assert {queue for queue, _, _ in settled} == {"b"}
    # A's requests are still held: B's went through meanwhile.
    assert endpoint.in_flight == 2
    assert [request.path for request in endpoint.requests].count("/a") == 2
    endpoint.release.set()
    assert sorted(key for _, key, _ in service.settled.wait_for(10)[6:]) == [
        "a0",
        "a1",
        "a2",
        "a3",
    ]


def test_the_answer_is_read_up_to_its_limit_then_the_connection_closed(service, endpoint):
    size = 256 * 1024 * 1024  # far more than the socket buffers hold
    endpoint.answer = lambda received: Answer(200, large_body=size)
    service.push_to(endpoint.url(), timeout=30)
    put(service.client, "q", "k", 1)
    assert service.settled.wait_for(1) == [("q", "k", PushResult.SUCCESS)]
    endpoint.wait_until(lambda e: len(e.large_body_written) == 1)
    ((written, gone),) = endpoint.large_body_written
    assert gone and RESPONSE_BODY_LIMIT <= written < size // 4


def test_requests_in_flight_never_pass_the_queues_concurrency(service, endpoint):
    endpoint.answer = lambda received: Answer(hold=True)
    service.push_to(endpoint.url(), timeout=30, concurrency=3)
    response = service.client.post(
        "/v1/queues/q/batch",
        json={"messages": [{"key": f"k{number:02d}", "payload": number} for number in range(12)]},
    )
    assert response.status_code == 200
    endpoint.wait_until(lambda e: e.in_flight == 3)
    # Claimed no more than it sends: the others are still ready for anyone.
    stats = service.client.get("/v1/queues/q").json()
    assert (stats["leased"], stats["ready"]) == (3, 9)
    assert endpoint.in_flight == 3
    # A poller of the queue shares it: it gets what is not being pushed, never that.
    pushing = {unquote(request.headers["hourglass-key"]) for request in endpoint.requests}
    polled = poll(service.client, "q", max=4, lease=60)
    assert len(polled["messages"]) == 4 and not pushing & {m["key"] for m in polled["messages"]}
    endpoint.release.set()
    service.settled.wait_for(8)
    assert endpoint.most_in_flight == 3
    assert len(endpoint.requests) == 8
    assert {unquote(request.headers["hourglass-key"]) for request in endpoint.requests}.isdisjoint(
        m["key"] for m in polled["messages"]
    )


def test_a_stop_cancels_requests_past_the_grace_and_releases_them_due_now(
    clean_database, clock, endpoint
):
    endpoint.answer = lambda received: Answer(hold=True)
    with service_for(clean_database, clock, endpoint.prefix) as service:
        service.push_to(endpoint.url(), timeout=30, concurrency=2)
        put(service.client, "q", "k1", 1)
        put(service.client, "q", "k2", 2)
        endpoint.wait_until(lambda e: e.in_flight == 2)
        service.dispatcher.stop_grace_seconds = 0.2
        clock.advance(3)
    rows = stored_rows(clean_database.url)
    assert [(row["pKey"], row["lockUuid"], row["scheduledAt"]) for row in rows] == [
        ("k1", None, clock.now),
        ("k2", None, clock.now),
    ]
    assert history_rows(clean_database.url) == []


def test_a_setting_changed_here_applies_at_once(service, endpoint):
    service.push_to(endpoint.url())
    assert list(service.dispatcher.pushers) == ["q"]
    service.configure(max_deliveries=3)  # push removed
    assert service.dispatcher.pushers == {}
    put(service.client, "q", "k", 1)
    assert [m["key"] for m in poll(service.client, "q")["messages"]] == ["k"]
    assert endpoint.requests == []


def test_pushes_started_by_a_settings_change_carry_no_request_id(service, endpoint):
    """A pusher started from the settings `PUT` runs in a context of its own: its log lines
    are not that request's."""
    ids: list[str | None] = []
    service.dispatcher.settled_listeners.append(lambda *_: ids.append(current_request_id.get()))
    answer = service.client.put(
        "/v1/queues/q/settings",
        json={"push": {"url": endpoint.url()}},
        headers={"X-Request-ID": "the-settings-put"},
    )
    assert answer.status_code == 200, answer.text
    put(service.client, "q", "k", 1)
    service.settled.wait_for(1)
    assert ids == [None]


def test_a_setting_changed_through_another_replica_applies_at_its_next_refresh(
    clean_database, clock, endpoint
):
    with (
        service_for(clean_database, clock, endpoint.prefix) as here,
        service_for(clean_database, clock, endpoint.prefix) as there,
    ):
        there.push_to(endpoint.url())
        here.refresh()
        assert list(here.dispatcher.pushers) == ["q"]
        there.configure(max_deliveries=3)
        here.refresh()
        assert here.dispatcher.pushers == {}


def test_a_replica_that_changed_a_queue_itself_still_follows_later_changes_elsewhere(
    clean_database, clock, endpoint
):
    with (
        service_for(clean_database, clock, endpoint.prefix) as here,
        service_for(clean_database, clock, endpoint.prefix) as there,
    ):
        here.push_to(endpoint.url())  # changed through this replica first
        assert list(here.dispatcher.pushers) == ["q"]
        there.configure(max_deliveries=3)  # push removed through the other
        here.refresh()
        assert here.dispatcher.pushers == {}
        there.push_to(endpoint.url("/again"))
        here.refresh()
        assert here.dispatcher.pushers["q"].target.url == endpoint.url("/again")


@pytest.mark.parametrize("narrower", ["http://127.0.0.1:1/", ""])
def test_a_stored_target_outside_a_narrower_list_is_never_called(
    clean_database, clock, endpoint, caplog, narrower
):
    with service_for(clean_database, clock, endpoint.prefix) as before:
        before.push_to(endpoint.url())
        before.configure("r", push={"url": endpoint.url("/r")})
    caplog.set_level(logging.WARNING, logger="app.push.dispatcher")
    with service_for(clean_database, clock, endpoint.prefix, push_allowed=narrower) as after:
        after.refresh()
        assert after.dispatcher.pushers == {}
        put(after.client, "q", "k", 1)
        assert [m["key"] for m in poll(after.client, "q")["messages"]] == ["k"]
        warnings = [r for r in caplog.records if "does not admit" in r.getMessage()]
        assert sorted(r.args[0] for r in warnings) == ["q", "r"]  # type: ignore[index]
    assert endpoint.requests == []


def test_once_told_to_stop_nothing_more_is_claimed(clean_database, clock, endpoint):
    endpoint.answer = lambda received: Answer(hold=True)
    with service_for(clean_database, clock, endpoint.prefix) as service:
        service.push_to(endpoint.url(), timeout=30, concurrency=1)
        put(service.client, "q", "k1", 1)
        put(service.client, "q", "k2", 2)
        endpoint.wait_until(lambda e: e.in_flight == 1)
        # What the server does the moment it is told to stop (SIGTERM).
        service.client.portal.call(service.client.app.state.stopping)  # type: ignore[union-attr,attr-defined]
        endpoint.release.set()  # k1's request ends within the grace: its slot comes free
        assert service.settled.wait_for(1) == [("q", "k1", PushResult.SUCCESS)]
        stats = service.client.get("/v1/queues/q").json()
        assert (stats["ready"], stats["leased"]) == (1, 0)
    assert len(endpoint.requests) == 1
    assert [(row["pKey"], row["lockUuid"]) for row in stored_rows(clean_database.url)] == [
        ("k2", None)
    ]
