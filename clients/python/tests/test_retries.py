"""What the client sends again and what it raises, against scripted answers (no server):
a repeat only where it cannot change what a first success did."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta, timezone

import httpx
import pytest

from hourglass_client import (
    AsyncClient,
    AsyncWorker,
    BadRequest,
    Client,
    ConnectionFailed,
    Forbidden,
    HourglassError,
    Invalid,
    NotFound,
    Offer,
    ServerError,
    TooLarge,
    Unauthorized,
    Unavailable,
)

WHEN = datetime(2031, 1, 1, tzinfo=UTC)
OFFERED = {
    "queue": "q",
    "key": "k",
    "outcome": "created",
    "scheduled_at": "2031-01-01T00:00:00.000Z",
}
UNAVAILABLE = httpx.Response(
    503,
    headers={"Retry-After": "0", "Content-Type": "application/problem+json"},
    json={
        "type": "urn:hourglass:problem:database-unavailable",
        "title": "Service Unavailable",
        "status": 503,
        "detail": "the database is unavailable",
    },
)


REAL_SLEEP = asyncio.sleep


@pytest.fixture(autouse=True)
def waits(monkeypatch) -> list[float]:
    """The pauses between tries, recorded instead of slept."""
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)

    monkeypatch.setattr(time, "sleep", pauses.append)
    monkeypatch.setattr(asyncio, "sleep", pause)
    return pauses


class Script:
    """Answers requests in turn; an exception in the script is raised instead."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        # A new answer each time: a read one cannot be sent again.
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.content)


def client(script: Script, **options) -> Client:
    return Client("http://hourglass.test", transport=httpx.MockTransport(script), **options)


def ok(body: object, status: int = 200) -> httpx.Response:
    return httpx.Response(status, json=body)


def test_a_503_is_waited_out_for_a_call_safe_to_repeat():
    script = Script(UNAVAILABLE, UNAVAILABLE, ok(OFFERED, 201))
    assert client(script).offer("q", "k", 1, scheduled_at=WHEN).outcome == "created"
    assert len(script.requests) == 3


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.offer("q", "k", 1, delay=5),  # a repeat would move the due time
        lambda c: c.offer("q", "k", 1),  # "now" is a new time at each request
        lambda c: c.create("q", 1),  # a repeat would create a second message
        lambda c: c.delete("q", "k"),  # ... delete one offered under the key since
        lambda c: c.purge("q"),
        lambda c: c.redrive("q.dead"),
        lambda c: c.uninstall_cron("q", "n"),
        lambda c: c.offer_many("q", [Offer("a", 1, scheduled_at=WHEN), Offer("b", 1)]),
        lambda c: c.offer_many(
            "q", [Offer("a", 1, scheduled_at=WHEN), Offer("a", 2, scheduled_at=WHEN)]
        ),
        # A poll whose answer was lost (a proxy's 504 after the claim) leased its messages.
        lambda c: c.poll("q", max=5),
    ],
)
def test_a_503_is_raised_at_once_for_a_call_a_repeat_could_change(call):
    script = Script(UNAVAILABLE, ok(OFFERED))
    with pytest.raises(Unavailable) as raised:
        call(client(script))
    assert len(script.requests) == 1
    assert raised.value.retry_after == 0 and raised.value.status == 503
    assert raised.value.type == "urn:hourglass:problem:database-unavailable"


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.get("q", "k"),
        lambda c: c.ack("q", "lock"),
        lambda c: c.ack_keys("q", "lock", ["a"]),
        lambda c: c.extend("q", "lock", 30),
        lambda c: c.release("q", "lock"),
        lambda c: c.release_keys("q", "lock", ["a"], delay=3),
        lambda c: c.stats("q"),
        lambda c: c.put_settings("q", max_deliveries=3),
        lambda c: c.install_cron("q", "n", 1, every=60),
        lambda c: c.update("q", "k", 1, scheduled_at=WHEN),
        lambda c: c.offer_many("q", [Offer("a", 1, scheduled_at=WHEN)]),
    ],
)
def test_calls_safe_to_repeat_are_retried_when_their_answer_was_lost(call):
    script = Script(httpx.ReadError("connection reset"), UNAVAILABLE, ok({}))
    try:
        call(client(script))
    except HourglassError:
        raise
    except KeyError:
        pass  # {} is no answer of most calls: what matters is that the third try came
    assert len(script.requests) == 3


def test_a_request_that_never_left_is_sent_again_whatever_it_is(waits):
    script = Script(httpx.ConnectError("refused"), httpx.ConnectTimeout("slow"), ok(OFFERED, 201))
    assert client(script).create("q", 1).outcome == "created"
    assert len(script.requests) == 3
    # Without a Retry-After: 0.5 s, then 1 s, each ±25%.
    assert 0.375 <= waits[0] <= 0.625 and 0.75 <= waits[1] <= 1.25


def test_a_lost_answer_is_raised_for_a_call_a_repeat_could_change():
    script = Script(httpx.ReadTimeout("no answer"), ok(OFFERED, 201))
    with pytest.raises(ConnectionFailed) as raised:
        client(script).create("q", 1)
    assert len(script.requests) == 1
    assert raised.value.status == 0 and isinstance(raised.value.__cause__, httpx.ReadTimeout)
    assert isinstance(raised.value, Unavailable)


def test_retries_are_bounded(waits):
    script = Script(UNAVAILABLE)
    with pytest.raises(Unavailable):
        client(script, retries=2).get("q", "k")
    assert len(script.requests) == 3 and waits == [0, 0]  # as Retry-After said
    waits.clear()
    slow = httpx.Response(503, headers={"Retry-After": "120"}, json={})
    with pytest.raises(Unavailable):
        client(Script(slow), retries=1, max_retry_wait=5).get("q", "k")
    assert waits == [5]
    script = Script(UNAVAILABLE)
    with pytest.raises(Unavailable):
        client(script, retries=0).get("q", "k")
    assert len(script.requests) == 1


def test_a_proxys_bad_gateway_is_retried_for_a_call_safe_to_repeat():
    script = Script(httpx.Response(502, text="<html>bad gateway</html>"), ok({"deleted": 0}))
    with pytest.raises(ServerError) as raised:
        client(script).purge("q")
    assert raised.value.status == 502 and raised.value.detail == "<html>bad gateway</html>"
    script = Script(httpx.Response(504, text="timeout"), httpx.Response(204))
    assert client(script).ack("q", "lock") is True
    assert len(script.requests) == 2


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (400, BadRequest),
        (401, Unauthorized),
        (403, Forbidden),
        (404, NotFound),
        (413, TooLarge),
        (422, Invalid),
        (500, ServerError),
        (418, HourglassError),
    ],
)
def test_problems_become_exceptions_with_their_fields(status, error):
    problem = {"type": f"urn:x:{status}", "title": "T", "status": status, "detail": "D", "more": 1}
    script = Script(httpx.Response(status, json=problem))
    with pytest.raises(error) as raised:
        client(script).get("q", "k")
    assert type(raised.value) is error
    assert (raised.value.type, raised.value.title, raised.value.status) == (
        f"urn:x:{status}",
        "T",
        status,
    )
    assert raised.value.detail == "D" and raised.value.problem == problem
    assert len(script.requests) == 1


def test_what_is_sent():
    script = Script(ok(OFFERED))
    hourglass = client(script, token="s3cret", headers={"X-Team": "a"})
    hourglass.offer("q", "a/..", {"n": 1}, scheduled_at=WHEN, if_exists="ignore")
    hourglass.offer("q", "..", 1)
    sent = script.requests
    assert sent[0].method == "PUT" and sent[0].url.raw_path == b"/v1/queues/q/messages/a%2F.."
    assert sent[1].url.raw_path == b"/v1/queues/q/messages/%2E%2E"
    assert json.loads(sent[0].content) == {
        "payload": {"n": 1},
        "scheduled_at": "2031-01-01T00:00:00.000Z",
        "if_exists": "ignore",
    }
    assert sent[0].headers["Authorization"] == "Bearer s3cret"
    assert sent[0].headers["X-Team"] == "a"
    assert sent[0].headers["User-Agent"].startswith("hourglass-client/")


def test_what_an_expiry_sends_and_when_it_is_repeated():
    results = [{"key": key, "outcome": "created"} for key in "ab"]
    batch = {"results": results, "created": 2, "updated": 0, "ignored": 0}
    script = Script(UNAVAILABLE, ok(OFFERED), ok(OFFERED), ok(OFFERED), ok(batch))
    hourglass = client(script)
    # A ttl counts from the due time: with `scheduled_at` a repeat sends the same expiry.
    hourglass.offer("q", "k", 1, scheduled_at=WHEN, ttl=timedelta(hours=1))
    assert len(script.requests) == 2
    hourglass.update(
        "q", "k", 1, expires_at=datetime(2031, 1, 1, 2, tzinfo=timezone(timedelta(hours=2)))
    )
    hourglass.create("q", 1, ttl=90)
    hourglass.offer_many("q", [Offer("a", 1, ttl=0.5), Offer("b", 1, expires_at=WHEN)])
    bodies = [json.loads(request.content) for request in script.requests[1:]]
    assert bodies[0]["ttl"] == 3600.0 and "expires_at" not in bodies[0]
    assert bodies[1] == {"payload": 1, "expires_at": "2031-01-01T00:00:00.000Z"}
    assert bodies[2] == {"payload": 1, "ttl": 90.0}
    assert [item.get("ttl") for item in bodies[3]["messages"]] == [0.5, None]
    assert bodies[3]["messages"][1]["expires_at"] == "2031-01-01T00:00:00.000Z"

    sent = len(script.requests)
    for call in (
        lambda c: c.offer("q", "k", 1, expires_at=WHEN, ttl=60),
        lambda c: c.update("q", "k", 1, expires_at=WHEN, ttl=60),
        lambda c: c.create("q", 1, expires_at=WHEN, ttl=60),
        lambda c: c.offer_many("q", [Offer("a", 1), Offer("b", 1, expires_at=WHEN, ttl=60)]),
        lambda c: c.offer("q", "k", 1, expires_at=datetime(2031, 1, 1)),  # no zone
    ):
        with pytest.raises(ValueError):
            call(hourglass)
    assert len(script.requests) == sent  # nothing went out


def test_a_cron_entry_s_ttl_is_sent_and_read():
    entry = {
        "queue": "q",
        "name": "n",
        "cron": None,
        "every": 60.0,
        "daily": None,
        "timezone": "UTC",
        "payload": 1,
        "lookahead": None,
        "config_hash": "h",
        "created_at": "2031-01-01T00:00:00.000Z",
        "updated_at": "2031-01-01T00:00:00.000Z",
        "next_runs": [],
        "priority": 0,
        "group": None,
        "paused_at": None,
    }
    script = Script(ok({**entry, "ttl": 300.0, "outcome": "created"}, 201), ok(entry))
    hourglass = client(script)
    installed = hourglass.install_cron("q", "n", 1, every=60, ttl=timedelta(minutes=5))
    assert json.loads(script.requests[0].content) == {"payload": 1, "every": 60.0, "ttl": 300.0}
    assert installed.ttl == 300.0
    assert hourglass.get_cron("q", "n").ttl is None  # none: its runs never expire


def test_a_long_poll_reads_for_its_wait_longer():
    script = Script(ok({"lock_id": None, "messages": []}))
    client(script, timeout=2).poll("q", wait=15)
    assert script.requests[0].extensions["timeout"]["read"] == 17
    assert json.loads(script.requests[0].content) == {"max": 1, "wait": 15.0}


def test_offer_many_chunks_any_number_into_batches():
    def answer(request: httpx.Request) -> httpx.Response:
        items = json.loads(request.content)["messages"]
        results = [{"key": item["key"], "outcome": "created"} for item in items]
        return ok({"results": results, "created": len(items), "updated": 0, "ignored": 0})

    sizes: list[int] = []

    def counting(request: httpx.Request) -> httpx.Response:
        sizes.append(len(json.loads(request.content)["messages"]))
        return answer(request)

    hourglass = Client("http://hourglass.test", transport=httpx.MockTransport(counting))
    offers = (Offer(f"k{index}", index) for index in range(2345))  # any iterable
    result = hourglass.offer_many("q", offers)
    assert sizes == [1000, 1000, 345]
    assert result.created == 2345 and [r.key for r in result.results][-1] == "k2344"
    sizes.clear()
    hourglass.offer_many("q", [Offer("a", 1)] * 5, batch_size=2)
    assert sizes == [2, 2, 1]
    with pytest.raises(ValueError):
        hourglass.offer_many("q", [], batch_size=1001)
    assert hourglass.offer_many("q", []).results == []


def test_the_async_client_retries_alike():
    script = Script(httpx.ConnectError("refused"), UNAVAILABLE, ok(OFFERED, 201))
    nothing_sent_twice = Script(UNAVAILABLE, ok(OFFERED, 201))

    async def main() -> None:
        transport = httpx.MockTransport(script)
        async with AsyncClient("http://hourglass.test", transport=transport) as hourglass:
            assert (await hourglass.offer("q", "k", 1, scheduled_at=WHEN)).outcome == "created"
        transport = httpx.MockTransport(nothing_sent_twice)
        async with AsyncClient("http://hourglass.test", transport=transport) as hourglass:
            with pytest.raises(Unavailable):
                await hourglass.create("q", 1)

    asyncio.run(main())
    assert len(script.requests) == 3 and len(nothing_sent_twice.requests) == 1


def test_url_and_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("HOURGLASS_URL", "http://elsewhere:9000/")
    monkeypatch.setenv("HOURGLASS_TOKEN", "from-env")
    options = Client().options
    assert (options.url, options.token) == ("http://elsewhere:9000", "from-env")
    assert Client("http://here", token="mine").options.token == "mine"


def test_a_worker_polls_again_after_an_unreadable_answer_and_settles_what_it_ran(monkeypatch):
    # A proxy's page in place of a poll's answer is a failed poll: paused after (1 s),
    # then polled again; the message of the next poll is handled and acknowledged. The
    # worker's own waits (its pause, its lease keeper's) are real here.
    monkeypatch.setattr(asyncio, "sleep", REAL_SLEEP)
    at, far = "2026-11-26T09:00:00.000Z", "2099-01-01T00:00:00.000Z"
    message = {
        "queue": "q",
        "key": "k",
        "payload": 1,
        "state": "leased",
        "deliveries": 1,
        "scheduled_at": at,
        "scheduled_at_initially": at,
        "created_at": at,
        "dead_lettered_from": None,
        "delivery": "first",
        "lease_expires_at": far,
    }
    polls = [
        httpx.Response(200, text="<html>upstream is restarting</html>"),
        ok({"lock_id": "lock", "messages": [message]}),
    ]
    sent: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(f"{request.method} {request.url.path}")
        if request.url.path.endswith("/poll"):
            return polls.pop(0) if polls else ok({"lock_id": None, "messages": []})
        if request.url.path.endswith("/ack"):
            return ok({"acknowledged": ["k"], "missing": []})
        return ok({"lease_expires_at": far})  # an extension

    handled: list[str] = []

    async def main() -> None:
        workers: list[AsyncWorker] = []

        async def handle(delivered) -> None:
            handled.append(delivered.key)
            workers[0].stop()

        transport = httpx.MockTransport(answer)
        async with AsyncClient("http://hourglass.test", transport=transport) as hourglass:
            workers.append(AsyncWorker(hourglass, "q", handle, wait=0))
            await workers[0].run(handle_signals=False)

    asyncio.run(main())
    assert handled == ["k"]
    assert sent.count("POST /v1/queues/q/locks/lock/ack") == 1
    assert sent[:2] == ["POST /v1/queues/q/poll", "POST /v1/queues/q/poll"]
