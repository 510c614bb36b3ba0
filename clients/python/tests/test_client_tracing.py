"""Offers send the current OpenTelemetry context as W3C `traceparent`/`tracestate` headers,
other calls send none, messages read their `trace`, and without opentelemetry-api the
client sends nothing of it (docs/guide/workers.md, "Tracing")."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, TraceState
from tracing_support import TIME, RecordsHeaders, Spans, delivered, traceparent

from hourglass_client import AsyncClient, Client, Message, Offer, Trace, _tracing
from hourglass_client.models.leases import Lease

CLIENT = Path(__file__).resolve().parents[1]

# Every offer call: one message under a key, an update, one under a made-up key, a batch.
OFFERS: dict[str, Callable[[Any], Any]] = {
    "offer": lambda client: client.offer("q", "k", {}),
    "update": lambda client: client.update("q", "k", {}),
    "create": lambda client: client.create("q", {}),
    "offer_many": lambda client: client.offer_many("q", [Offer("a", 1), Offer("b", 2)]),
}


def send(kind: str, call: Callable[[Any], Any], transport: RecordsHeaders) -> None:
    """`call` on a `Client` (kind "sync") or an `AsyncClient` ("async") over `transport`."""
    if kind == "sync":
        with Client("http://hourglass.test", transport=transport, retries=0) as client:
            call(client)
        return

    async def run() -> None:
        async with AsyncClient("http://hourglass.test", transport=transport, retries=0) as client:
            await call(client)

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize("offer", OFFERS)
def test_offers_send_the_current_span_context(kind: str, offer: str) -> None:
    spans, transport = Spans(), RecordsHeaders()
    with spans.tracer.start_as_current_span("produce") as span:
        send(kind, OFFERS[offer], transport)
    assert transport.sent("traceparent") == [traceparent(span.get_span_context())]
    assert transport.sent("tracestate") == [None]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_a_batch_offer_sends_the_headers_with_the_trace_state(kind: str) -> None:
    """A batch's headers apply to each of its messages; a span's trace state goes along."""
    state = TraceState([("vendor", "opaque"), ("other", "x")])
    producer = SpanContext(
        0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=state
    )
    transport = RecordsHeaders()
    with trace.use_span(NonRecordingSpan(producer)):
        send(kind, OFFERS["offer_many"], transport)
    assert transport.sent("traceparent") == [f"00-{0xABC:032x}-{0xDEF:016x}-01"]
    assert transport.sent("tracestate") == ["vendor=opaque,other=x"]


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_outside_a_span_offers_send_no_trace(kind: str) -> None:
    transport = RecordsHeaders()
    for call in OFFERS.values():
        send(kind, call, transport)
    assert transport.sent("traceparent") == [None] * len(OFFERS)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_other_calls_send_no_trace_in_a_span(kind: str) -> None:
    spans, transport = Spans(), RecordsHeaders()
    with spans.tracer.start_as_current_span("produce"):
        send(kind, lambda client: client.poll("q", max=1, wait=0), transport)
    assert [request.url.path for request in transport.requests] == ["/v1/queues/q/poll"]
    assert transport.sent("traceparent") == [None]


def test_messages_read_their_trace() -> None:
    """A poll's messages and a read message carry `trace`; null, or left out by a service from
    before traces, is None."""
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    answer = {
        "lock_id": "lock",
        "messages": [
            delivered("with", {"traceparent": parent, "tracestate": "a=b"}),
            delivered("bare", {"traceparent": parent, "tracestate": None}),
            delivered("none", None),
            delivered("old"),
        ],
    }
    traces = [message.trace for message in Lease.from_json(answer).messages]
    assert traces == [Trace(parent, "a=b"), Trace(parent, None), None, None]
    stored = {
        key: value
        for key, value in delivered("read", {"traceparent": parent, "tracestate": None}).items()
        if key not in ("delivery", "lease_expires_at")
    }
    assert Message.from_json(stored).trace == Trace(parent)
    assert Message.from_json({**stored, "trace": None}).trace is None
    del stored["trace"]
    assert Message.from_json(stored).trace is None


def test_without_opentelemetry_api_offers_send_no_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The guarded import fails when opentelemetry cannot be imported; the client then sends
    no trace headers, even in a span."""
    with monkeypatch.context() as blocked:
        blocked.setitem(sys.modules, "opentelemetry", None)
        assert _tracing.imported() is None
    monkeypatch.setattr(_tracing, "API", None)
    spans, transport = Spans(), RecordsHeaders()
    with spans.tracer.start_as_current_span("produce"):
        for kind in ("sync", "async"):
            for call in OFFERS.values():
                send(kind, call, transport)
    assert transport.sent("traceparent") == [None] * 2 * len(OFFERS)


def test_the_client_runs_where_opentelemetry_cannot_be_imported(tmp_path: Path) -> None:
    """In a process where importing opentelemetry fails, the client imports, offers and
    polls, and never imports it."""
    script = tmp_path / "no_otel.py"
    script.write_text(
        "import sys\n"
        "class Refuse:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'opentelemetry':\n"
        "            raise ModuleNotFoundError(name)\n"
        "sys.meta_path.insert(0, Refuse())\n"
        "import httpx\n"
        "from hourglass_client import Client, _tracing\n"
        "from hourglass_client.worker._tracing import consumer\n"
        "seen = []\n"
        "def answer(request):\n"
        "    seen.append(request.headers.get('traceparent'))\n"
        "    if request.url.path.endswith('/poll'):\n"
        "        return httpx.Response(200, json={'lock_id': None, 'messages': []})\n"
        "    return httpx.Response(201, json={'queue': 'q', 'key': 'k', 'outcome': 'created',\n"
        f"        'scheduled_at': '{TIME}'}})\n"
        "with Client('http://hourglass.test', transport=httpx.MockTransport(answer)) as c:\n"
        "    c.offer('q', 'k', {})\n"
        "    c.poll('q', max=1, wait=0)\n"
        "assert _tracing.API is None and _tracing.headers() is None\n"
        "assert consumer('q', '0') is None\n"
        "assert seen == [None, None], seen\n"
        "assert not [m for m in sys.modules if m.startswith('opentelemetry')]\n"
        "print('ok')\n"
    )
    path = os.pathsep.join([str(CLIENT), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, str(script)],
        check=False,
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_an_invalid_current_span_sends_no_trace() -> None:
    transport = RecordsHeaders()
    with trace.use_span(trace.INVALID_SPAN):
        send("sync", OFFERS["offer"], transport)
    assert transport.sent("traceparent") == [None]


def test_the_otel_extra_names_the_api_only() -> None:
    """`hourglass-client[otel]` brings opentelemetry-api and nothing else; the client's own
    dependencies stay httpx alone."""
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    assert [
        requirement.split(">")[0] for requirement in project["optional-dependencies"]["otel"]
    ] == ["opentelemetry-api"]
    assert [requirement.split(">")[0] for requirement in project["dependencies"]] == ["httpx"]
