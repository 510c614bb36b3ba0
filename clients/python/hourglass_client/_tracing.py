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
        from opentelemetry.trace import span
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
        # A message's producer span, made without the propagator (worker/_tracing.py).
        self.span_context = trace.SpanContext
        self.non_recording_span = trace.NonRecordingSpan
        self.invalid_span = trace.INVALID_SPAN
        self.trace_flags = {f"{flags:02x}": trace.TraceFlags(flags) for flags in range(256)}
        self.trace_state = trace.TraceState.from_header
        # The propagator's bound on a tracestate (a longer one is dropped, and logged).
        self.max_tracestate = getattr(span, "_TRACECONTEXT_MAXIMUM_TRACESTATE_LENGTH", 512)
        # What tells the API's no-op tracer: the global tracer provider's proxy tracer defers
        # to the provider set globally, none while this is None (opentelemetry.trace's own
        # global; None here when an API without it cannot tell).
        self.trace_globals = trace if hasattr(trace, "_TRACER_PROVIDER") else None
        self.proxy_tracer = trace.ProxyTracer
        self.no_op_tracer = trace.NoOpTracer


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
