"""A worker makes a message's parent span from its trace as W3C's propagator extracts it
(without the propagator, for speed: worker/_tracing.py), and with the API's no-op tracer
(no SDK) starts no span but runs the handler in that parent's context, until a tracer
provider is set globally, even after the worker started (docs/guide/workers.md,
"Tracing")."""

from __future__ import annotations

import dataclasses

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NoOpTracerProvider, SpanContext
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util._once import Once
from tracing_support import Spans, delivered, traceparent

from hourglass_client import DeliveredMessage
from hourglass_client.models.leases import Lease
from hourglass_client.models.messages import Trace
from hourglass_client.worker._tracing import consumer

TRACE_ID, PARENT_ID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
IDS = f"{TRACE_ID}-{PARENT_ID}"
TRACES = {
    "sampled": Trace(f"00-{IDS}-01"),
    "not sampled": Trace(f"00-{IDS}-00"),
    "every flag": Trace(f"00-{IDS}-ff"),
    "tracestate": Trace(f"00-{IDS}-01", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
    "empty tracestate": Trace(f"00-{IDS}-01", ""),
    "malformed tracestate": Trace(f"00-{IDS}-01", "not a member"),
    "duplicate tracestate keys": Trace(f"00-{IDS}-01", "a=1,a=2"),
    "too long a tracestate": Trace(f"00-{IDS}-01", "a=" + "b" * 9000),
    "uppercase trace id": Trace(f"00-{TRACE_ID.upper()}-{PARENT_ID}-01"),
    "uppercase parent id": Trace(f"00-{TRACE_ID}-{PARENT_ID.upper()}-01"),
    "uppercase flags": Trace(f"00-{IDS}-0A"),
    "zero trace id": Trace(f"00-{0:032x}-{PARENT_ID}-01"),
    "zero parent id": Trace(f"00-{TRACE_ID}-{0:016x}-01"),
    "later version": Trace(f"01-{IDS}-01-later"),
    "version ff": Trace(f"ff-{IDS}-01"),
    "version 00, more": Trace(f"00-{IDS}-01-more"),
    "spaces around": Trace(f" 00-{IDS}-01 "),
    "short flags": Trace(f"00-{IDS}-1"),
    "malformed": Trace("00-not-a-traceparent-01"),
}


def message(sent: Trace | None) -> DeliveredMessage:
    stored = None if sent is None else dataclasses.asdict(sent)
    answer = {"lock_id": "lock", "messages": [delivered("k", stored)]}
    [one] = Lease.from_json(answer).messages
    return one


def extracted(sent: Trace) -> SpanContext:
    """The parent span's context as W3C's propagator extracts it."""
    carrier = {"traceparent": sent.traceparent}
    if sent.tracestate is not None:
        carrier["tracestate"] = sent.tracestate
    context = TraceContextTextMapPropagator().extract(carrier)
    return trace.get_current_span(context).get_span_context()


@pytest.mark.parametrize("stored", TRACES.values(), ids=TRACES.keys())
def test_the_parent_is_what_w3c_propagator_extracts(stored: Trace) -> None:
    expected = extracted(stored)
    spans = Spans()
    provider = TracerProvider(sampler=ALWAYS_ON)  # a span also for an unsampled parent
    provider.add_span_processor(SimpleSpanProcessor(spans.exporter))
    sdk = consumer("q", "1", tracer_provider=provider)
    no_op = consumer("q", "1", tracer_provider=NoOpTracerProvider())
    assert sdk is not None and no_op is not None
    current: list[SpanContext] = []

    def handle(message: DeliveredMessage) -> None:
        current.append(trace.get_current_span().get_span_context())

    for _ in range(2):  # the second time from what the first kept (a parsed tracestate)
        sdk.run(handle, message(stored))
        no_op.run(handle, message(stored))
    [span, again] = spans.finished("process q")
    for one in (span, again):
        assert one.parent == (expected if expected.is_valid else None)
        assert one.context.trace_state == expected.trace_state
    # The no-op tracer's span is its parent.
    assert current == [span.context, expected, again.context, expected]


def test_a_message_without_a_trace_runs_in_no_span_without_an_sdk() -> None:
    no_op = consumer("q", "1", tracer_provider=NoOpTracerProvider())
    assert no_op is not None
    current: list[trace.Span] = []
    with Spans().tracer.start_as_current_span("around the worker"):
        no_op.run(lambda message: current.append(trace.get_current_span()), message(None))
    assert current == [trace.INVALID_SPAN]
    assert current[0].get_span_context() == INVALID_SPAN_CONTEXT


@pytest.fixture
def no_global_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    """No tracer provider set globally, and one may be set (both put back afterwards)."""
    monkeypatch.delenv("OTEL_PYTHON_TRACER_PROVIDER", raising=False)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())


@pytest.mark.usefixtures("no_global_provider")
def test_a_provider_set_globally_after_the_worker_started_is_used() -> None:
    spans = Spans()
    with spans.tracer.start_as_current_span("send q", kind=trace.SpanKind.PRODUCER) as producer:
        stored = Trace(traceparent(producer.get_span_context()))
    spans_of = consumer("q", "1")  # as a worker starts: the global provider's (none yet)
    assert spans_of is not None
    current: list[SpanContext] = []

    def handle(message: DeliveredMessage) -> None:
        current.append(trace.get_current_span().get_span_context())

    spans_of.run(handle, message(stored))
    assert spans.finished("process q") == []
    sent = producer.get_span_context()
    assert [(one.trace_id, one.span_id, one.is_remote) for one in current] == [
        (sent.trace_id, sent.span_id, True)
    ]
    trace.set_tracer_provider(spans.provider)
    spans_of.run(handle, message(stored))
    [span] = spans.finished("process q")
    assert span.parent is not None and span.parent.span_id == sent.span_id
    assert current[1] == span.context
