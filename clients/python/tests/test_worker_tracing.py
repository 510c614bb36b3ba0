"""Workers run each handler in a CONSUMER span whose parent is the span that offered the
message, record a handler's exception on it, and make none with `tracing=False` or
without opentelemetry-api (docs/guide/workers.md, "Tracing").

These read the messages from a service in a transport (tracing_support.HandsOut), to
give them any trace, a malformed one or none; test_worker_tracing_service.py runs the
whole way through real servers."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode
from tracing_support import HandsOut, Spans, delivered, traceparent, workers_reach

from hourglass_client import AsyncClient, AsyncWorker, DeliveredMessage, Retry, Worker, _tracing
from worker_support import working

URL = "http://hourglass.test"


def run_worker(
    kind: str,
    service: HandsOut,
    handler: Callable[[DeliveredMessage], None],
    monkeypatch: pytest.MonkeyPatch,
    **options: Any,
) -> None:
    """A `Worker` (kind "threads") or an `AsyncWorker` ("async") running `handler` (called on
    the handler's thread or task) until `service` has every message settled."""
    if kind == "threads":
        workers_reach(service, monkeypatch)
        with working(Worker(URL, "q", handler, wait=5, **options)) as errors:
            service.wait()
        assert not errors
        return

    async def run() -> None:
        async def handle(message: DeliveredMessage) -> None:
            handler(message)

        async with AsyncClient(URL, transport=service) as client:
            worker = AsyncWorker(client, "q", handle, wait=5, **options)
            running = asyncio.create_task(worker.run(handle_signals=False))
            await asyncio.to_thread(service.wait)
            worker.stop()
            await running

    asyncio.run(run())


def produced(spans: Spans, state: str | None = None) -> tuple[trace.SpanContext, dict[str, Any]]:
    """A producer span, ended, and the `trace` a service stores for what it offered."""
    with spans.tracer.start_as_current_span("send q", kind=SpanKind.PRODUCER) as span:
        context = span.get_span_context()
    return context, {"traceparent": traceparent(context), "tracestate": state}


@pytest.fixture(params=["threads", "async"])
def kind(request: pytest.FixtureRequest) -> str:
    return request.param


def test_a_handler_runs_in_a_consumer_span_child_of_its_producer(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = Spans()
    producer, stored = produced(spans, state="vendor=opaque")
    service = HandsOut([delivered("k", stored)])
    current: list[trace.SpanContext] = []
    run_worker(
        kind,
        service,
        lambda message: current.append(trace.get_current_span().get_span_context()),
        monkeypatch,
        tracer_provider=spans.provider,
    )
    assert service.acknowledged == ["k"]
    [span] = spans.finished("process q")
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is not None
    assert span.parent.span_id == producer.span_id
    assert span.context.trace_id == producer.trace_id
    assert span.context.trace_state.get("vendor") == "opaque"
    assert current == [span.context]  # what the handler offers carries its span on
    assert span.instrumentation_scope.name == "hourglass_client"
    assert span.status.status_code is StatusCode.UNSET
    assert dict(span.attributes or {}) == {
        "messaging.system": "hourglass",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "q",
        "messaging.message.id": "k",
        "messaging.hourglass.message.delivery_count": 1,
    }


def test_each_message_of_a_poll_is_a_child_of_its_own_producer(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = Spans()
    producers = [produced(spans) for _ in range(3)]
    service = HandsOut([delivered(f"k{n}", stored) for n, (_, stored) in enumerate(producers)])
    run_worker(kind, service, lambda message: None, monkeypatch, tracer_provider=spans.provider)
    parents = {
        span.attributes["messaging.message.id"]: (span.parent.span_id, span.context.trace_id)
        for span in spans.finished("process q")
        if span.attributes is not None and span.parent is not None
    }
    assert parents == {
        f"k{n}": (context.span_id, context.trace_id) for n, (context, _) in enumerate(producers)
    }


def test_a_handler_error_marks_its_span_error(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spans = Spans()
    _, stored = produced(spans)
    service = HandsOut([delivered("k", stored)])

    def fail(message: DeliveredMessage) -> None:
        raise ValueError("no such user")

    run_worker(kind, service, fail, monkeypatch, tracer_provider=spans.provider)
    assert service.released == ["k"]  # released as without tracing
    [span] = spans.finished("process q")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: no such user"
    assert span.attributes is not None and span.attributes["error.type"] == "ValueError"
    [event] = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == "ValueError"


def test_a_retry_is_an_event_not_an_error(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spans = Spans()
    service = HandsOut([delivered("k", produced(spans)[1])])

    def later(message: DeliveredMessage) -> None:
        raise Retry(delay=5, reason="busy")

    run_worker(kind, service, later, monkeypatch, tracer_provider=spans.provider)
    assert service.released == ["k"]
    [span] = spans.finished("process q")
    assert span.status.status_code is StatusCode.UNSET
    assert [(event.name, dict(event.attributes or {})) for event in span.events] == [
        ("hourglass.retry", {"hourglass.retry.reason": "busy", "hourglass.retry.delay": 5.0})
    ]


@pytest.mark.parametrize(
    "stored",
    [
        None,
        "absent",  # a service from before traces
        {"traceparent": "00-not-a-traceparent-01", "tracestate": None},
        {"traceparent": f"00-{0:032x}-{1:016x}-01", "tracestate": None},  # an invalid trace id
    ],
    ids=["null", "absent", "malformed", "invalid"],
)
def test_a_message_without_a_valid_trace_gets_a_root_span(
    stored: Any, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    spans = Spans()
    service = HandsOut([delivered("k", stored)])
    with spans.tracer.start_as_current_span("around the worker"):  # not the handler's parent
        run_worker(kind, service, lambda message: None, monkeypatch, tracer_provider=spans.provider)
    assert service.acknowledged == ["k"]
    [span] = spans.finished("process q")
    assert span.parent is None
    assert span.kind is SpanKind.CONSUMER


def test_tracing_false_makes_no_span(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spans = Spans()
    service = HandsOut([delivered("k", produced(spans)[1])])
    current: list[trace.Span] = []
    run_worker(
        kind,
        service,
        lambda message: current.append(trace.get_current_span()),
        monkeypatch,
        tracing=False,
        tracer_provider=spans.provider,
    )
    assert service.acknowledged == ["k"]
    assert spans.finished("process q") == []
    assert not current[0].get_span_context().is_valid


def test_workers_run_without_opentelemetry_api(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With the guarded import failed, the workers make no span and run as before."""
    monkeypatch.setattr(_tracing, "API", None)
    spans = Spans()
    service = HandsOut([delivered("ok", produced(spans)[1]), delivered("fails")])

    def handle(message: DeliveredMessage) -> None:
        if message.key == "fails":
            raise ValueError("failed")

    run_worker(kind, service, handle, monkeypatch, tracer_provider=spans.provider)
    assert (service.acknowledged, service.released) == (["ok"], ["fails"])
    assert spans.finished("process q") == []
