"""Trace context through the service: opentelemetry-api (the `otel` extra), imported once,
here, and the W3C `traceparent`/`tracestate` headers every offer sends
(docs/guide/workers.md, "Tracing"); the workers' consumer spans are worker/_tracing.py's.

Without opentelemetry-api, `API` is None and `headers()` None: the client sends what it
sends without tracing, and the workers make no spans.
"""

from __future__ import annotations


class Api:
    """The parts of opentelemetry-api used here; importing it raises ImportError when it is
    not installed."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.attach = context.attach
        self.detach = context.detach
        # The parent of a message's span when the message carries no trace: none.
        self.no_parent = context.Context()
        self.current_span = trace.get_current_span
        self.in_context = trace.set_span_in_context
        self.get_tracer = trace.get_tracer
        self.consumer_kind = trace.SpanKind.CONSUMER
        self.error = trace.StatusCode.ERROR
        self.status = trace.Status
        # W3C's own propagator, not the globally configured one: the service stores W3C
        # headers only.
        self.propagator = TraceContextTextMapPropagator()


def imported() -> Api | None:
    """opentelemetry-api, or None when it cannot be imported (or is too old to have what
    is used here: the client then runs without tracing rather than fail)."""
    try:
        return Api()
    except (ImportError, AttributeError):
        return None


API = imported()


def headers() -> dict[str, str] | None:
    """The current span's `traceparent` (and `tracestate`, if any) as request headers; None
    without opentelemetry-api or outside a valid span."""
    api = API
    if api is None or not api.current_span().get_span_context().is_valid:
        return None
    carrier: dict[str, str] = {}
    api.propagator.inject(carrier)
    return carrier
