"""Trace context the whole way through real servers (SQLite and PostgreSQL): what an offer
sends in a span comes back as the message's `trace`, and the worker's consumer span is a
child of the producer's (docs/guide/workers.md, "Tracing")."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, TraceFlags, TraceState
from tracing_support import Spans, traceparent

from hourglass_client import (
    AsyncClient,
    AsyncWorker,
    Client,
    DeliveredMessage,
    Offer,
    Trace,
    Worker,
)
from tests.support.server import Server
from worker_support import WAIT, Countdown, working

# Every offer call, each offering the keys it returns.
OFFERS: dict[str, Callable[[Any, str], list[str]]] = {
    "offer": lambda api, queue: [api.offer(queue, "k", 1).key],
    "update": lambda api, queue: [api.offer(queue, "k", 1).key, api.update(queue, "k", 2).key],
    "create": lambda api, queue: [api.create(queue, 1).key],
    "offer_many": lambda api, queue: [
        outcome.key for outcome in api.offer_many(queue, [Offer("a", 1), Offer("b", 2)]).results
    ],
}


@pytest.mark.parametrize("offer", OFFERS)
def test_an_offer_in_a_span_is_stored_with_its_trace(api: Any, queue: str, offer: str) -> None:
    state = TraceState([("vendor", "opaque")])
    producer = SpanContext(
        0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(1), trace_state=state
    )
    with trace.use_span(NonRecordingSpan(producer)):
        keys = OFFERS[offer](api, queue)
    stored = Trace(f"00-{0xABC:032x}-{0xDEF:016x}-01", "vendor=opaque")
    assert [api.get(queue, key).trace for key in keys] == [stored] * len(keys)
    lease = api.poll(queue, max=10, wait=0)
    assert [message.trace for message in lease.messages] == [stored] * len(set(keys))


def test_an_offer_outside_a_span_has_no_trace(hourglass: Client, queue: str) -> None:
    hourglass.offer(queue, "k", 1)
    assert hourglass.get(queue, "k").trace is None
    assert [message.trace for message in hourglass.poll(queue, max=1, wait=0).messages] == [None]


def _work(
    kind: str,
    url: str,
    queue: str,
    handler: Callable[[DeliveredMessage], None],
    spans: Spans,
    count: int,
) -> None:
    """A `Worker` or an `AsyncWorker` of `queue` until `handler` has run `count` times."""
    done = Countdown(count)

    def handle(message: DeliveredMessage) -> None:
        handler(message)
        done.tick()

    if kind == "threads":
        with working(Worker(url, queue, handle, wait=1, tracer_provider=spans.provider)) as errors:
            assert done.reached.wait(WAIT)
        assert not errors
        return

    async def run() -> None:
        async def handle_async(message: DeliveredMessage) -> None:
            handle(message)

        async with AsyncClient(url) as client:
            worker = AsyncWorker(
                client, queue, handle_async, wait=1, tracer_provider=spans.provider
            )
            running = asyncio.create_task(worker.run(handle_signals=False))
            assert await asyncio.to_thread(done.reached.wait, WAIT)
            worker.stop()
            await running

    asyncio.run(run())


@pytest.mark.parametrize("kind", ["threads", "async"])
def test_the_handler_span_is_a_child_of_the_producer_span(
    kind: str, service: Server, hourglass: Client, queue: str
) -> None:
    """One message offered alone and two in a batch, each in a producer span of its own: each
    handler's span has its producer's span for parent, in its producer's trace; what a
    handler offers carries the handler's span on."""
    spans = Spans()
    producers: dict[str, SpanContext] = {}
    with spans.tracer.start_as_current_span("send one", kind=SpanKind.PRODUCER) as span:
        hourglass.offer(queue, "one", 1)
        producers["one"] = span.get_span_context()
    with spans.tracer.start_as_current_span("send batch", kind=SpanKind.PRODUCER) as span:
        hourglass.offer_many(queue, [Offer("a", 1), Offer("b", 2)])
        producers["a"] = producers["b"] = span.get_span_context()
    follow_up = f"{queue}-next"
    offered_from: dict[str, SpanContext] = {}
    lock = threading.Lock()

    def handler(message: DeliveredMessage) -> None:
        with Client(service.url) as client:
            client.offer(follow_up, message.key, None)
        with lock:
            offered_from[message.key] = trace.get_current_span().get_span_context()

    _work(kind, service.url, queue, handler, spans, 3)
    consumers = {
        span.attributes["messaging.message.id"]: span for span in spans.finished(f"process {queue}")
    }
    assert sorted(consumers) == ["a", "b", "one"]
    for key, consumer in consumers.items():
        assert consumer.kind is SpanKind.CONSUMER
        assert consumer.parent is not None
        assert consumer.parent.span_id == producers[key].span_id
        assert consumer.context.trace_id == producers[key].trace_id
        assert offered_from[key] == consumer.context
        assert hourglass.get(follow_up, key).trace == Trace(traceparent(consumer.context))
