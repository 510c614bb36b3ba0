"""Helpers of the tracing tests: an SDK tracer provider that keeps its spans in memory, the
`traceparent` of a span, a transport that records what offers send, and a service in
an httpx transport that hands out messages with the traces a test gives them (for what
the client does with a poll's answer: an old service's, or a malformed trace)."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

from hourglass_client import AsyncClient
from hourglass_client.client import Options
from hourglass_client.worker import workers
from worker_support import WAIT

TIME = "2026-01-01T00:00:00.000000Z"
LATER = "2026-01-01T00:00:30.000000Z"


class Spans:
    """A tracer provider of the SDK whose spans end up in `finished()` (never set globally:
    the tests hand it to what they test)."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.tracer = self.provider.get_tracer("tests")

    def finished(self, name: str | None = None) -> list[ReadableSpan]:
        return [
            span for span in self.exporter.get_finished_spans() if name is None or span.name == name
        ]


def traceparent(context: SpanContext) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


class RecordsHeaders(httpx.MockTransport):
    """Answers every request as a service would an offer (or a poll with nothing due), and
    records each request's method, path and headers."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        super().__init__(self._answer)

    def _answer(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path.endswith("/batch"):
            keys = [item["key"] for item in json.loads(request.content)["messages"]]
            results = [{"key": key, "outcome": "created"} for key in keys]
            body = {"results": results, "created": len(keys), "updated": 0, "ignored": 0}
            return httpx.Response(200, json=body)
        if path.endswith("/poll"):
            return httpx.Response(200, json={"lock_id": None, "messages": []})
        key = path.rpartition("/")[2] if request.method == "PUT" else "made-up"
        outcome = {"queue": "q", "key": key, "outcome": "created", "scheduled_at": TIME}
        return httpx.Response(201, json=outcome)

    def sent(self, header: str) -> list[str | None]:
        return [request.headers.get(header) for request in self.requests]


def delivered(key: str, trace: dict[str, Any] | None | str = "absent") -> dict[str, Any]:
    """A message as a poll answers it; `trace` left out (`"absent"`) as an old service does."""
    message = {
        "queue": "q",
        "key": key,
        "payload": key,
        "scheduled_at": LATER,
        "scheduled_at_initially": TIME,
        "created_at": TIME,
        "state": "leased",
        "deliveries": 1,
        "delivery": "first",
        "lease_expires_at": LATER,
    }
    if trace != "absent":
        message["trace"] = trace
    return message


class HandsOut(httpx.AsyncBaseTransport):
    """A service of one queue, in a transport: the first poll hands out `messages` under one
    lock, later ones nothing (a poll that may wait waits until it is cancelled); it
    records what is acknowledged and released, and sets `settled` once every message is."""

    def __init__(self, messages: list[dict[str, Any]]) -> None:
        self.messages = messages
        self.count = len(messages)
        self.acknowledged: list[str] = []
        self.released: list[str] = []
        self.settled = threading.Event()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else {}
        route = request.url.path.rpartition("/")[2]
        if route == "poll":
            answer: dict[str, Any] = {"lock_id": None, "messages": []}
            if "ack" in body:
                self._done(self.acknowledged, body["ack"]["keys"])
                answer.update(acknowledged=body["ack"]["keys"], missing=[])
            if self.messages:
                answer.update(lock_id="lock", messages=self.messages)
                self.messages = []
            elif body.get("wait") and "ack" not in body:
                await asyncio.Event().wait()  # nothing comes: until the worker stops
            return httpx.Response(200, json=answer)
        if route == "ack":
            self._done(self.acknowledged, body["keys"])
            return httpx.Response(200, json={"acknowledged": body["keys"], "missing": []})
        if route == "release":
            self._done(self.released, body["keys"])
            return httpx.Response(200, json={"released": body["keys"], "missing": []})
        return httpx.Response(200, json={"lease_expires_at": LATER})  # an extension

    def _done(self, into: list[str], keys: list[str]) -> None:
        into.extend(keys)
        if len(self.acknowledged) + len(self.released) >= self.count:
            self.settled.set()

    def wait(self) -> None:
        assert self.settled.wait(WAIT), "not every message was settled"


def workers_reach(transport: HandsOut, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Worker`s reach the service through `transport` for the rest of the test (a `Worker`
    makes its own client, from its options)."""

    class Through(AsyncClient):
        @classmethod
        def from_options(cls, options: Options, transport_: object = None) -> AsyncClient:
            return AsyncClient(options.url, transport=transport)

    monkeypatch.setattr(workers, "AsyncClient", Through)
