"""The consumer span a worker runs each handler in: a child of the span that offered the
message (docs/guide/workers.md, "Tracing").

With opentelemetry-api and no SDK configured, nothing is recorded (the API's tracer is a
no-op one, whose spans are their parents'), but a handler still runs in its producer's
span context, so what it offers carries the producer's trace on.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hourglass_client import _tracing
from hourglass_client.models.leases import DeliveredMessage
from hourglass_client.models.messages import Trace
from hourglass_client.worker.handlers import Retry

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, TracerProvider, TraceState

# The instrumentation scope's name: the distribution's import name.
SCOPE = "hourglass_client"
# OpenTelemetry's messaging conventions: the system, and this operation's type and name.
SYSTEM = "hourglass"
OPERATION = "process"


def consumer(
    queue: str, version: str, *, enabled: bool = True, tracer_provider: TracerProvider | None = None
) -> Consumer | None:
    """The consumer spans of a worker of `queue`; None when `enabled` is false or without
    opentelemetry-api. The tracer comes from `tracer_provider`, else from the global
    provider at this call (a provider set later is still used: the API's tracer defers
    to it)."""
    if not enabled or _tracing.API is None:
        return None
    return Consumer(_tracing.API, queue, _tracing.API.get_tracer(SCOPE, version, tracer_provider))


# A traceparent as the service keeps version 00's (lowercase hex): the one read here
# without the propagator, whose parse any other goes through.
_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})").fullmatch
# The most tracestates kept parsed (a producer's tend to repeat).
_TRACE_STATES = 256


class Consumer:
    """Runs a handler in a CONSUMER span `process <queue>` whose parent is the span that
    offered the message (a root span when the message carries no trace), with the
    messaging attributes of OpenTelemetry's conventions. An exception is recorded on
    the span with status ERROR; a `Retry` is an event, not an error.

    What a message costs is the point here (`python -m bench.tracing_cost`): its producer's
    span is made from its traceparent without the propagator, the attributes but the
    message's own are made once, and while the tracer is the API's no-op one (no SDK
    configured) no span is started at all, as that tracer's would be its parent's."""

    __slots__ = ("_api", "_attributes", "_globals", "_name", "_no_op", "_states", "_tracer")

    def __init__(self, api: _tracing.Api, queue: str, tracer: Any) -> None:
        self._api = api
        self._name = f"{OPERATION} {queue}"
        self._tracer = tracer
        self._attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": OPERATION,
            "messaging.operation.name": OPERATION,
            "messaging.destination.name": queue,
        }
        # The no-op tracer's span is its parent's (the producer's, else the invalid span), as
        # OpenTelemetry's specification asks (opentelemetry-api 1.20, the oldest the extra
        # takes, gave the invalid span; this keeps the producer's context on every release):
        # always for the no-op tracer, and for the global provider's proxy tracer until a
        # provider is set globally (checked each message: one may be set while this runs),
        # opentelemetry.trace's `_TRACER_PROVIDER` (`_globals`, for a proxy tracer only).
        self._no_op = type(tracer) is api.no_op_tracer
        self._globals = api.trace_globals if type(tracer) is api.proxy_tracer else None
        self._states: dict[str, TraceState] = {}  # tracestates parsed, by header

    def _start(self, message: DeliveredMessage) -> tuple[Span, Context]:
        """The message's span, started, and the context its handler runs in: the message's
        own (its producer's span, else none) with the span in it, not the worker's."""
        api, trace = self._api, message.trace
        if trace is None:
            parent: Span = api.invalid_span
            context = api.no_parent
        else:
            parent, context = self._producer(trace)
        if self._no_op or (self._globals is not None and self._globals._TRACER_PROVIDER is None):
            return parent, context  # what the no-op tracer starts, and its context
        attributes = self._attributes.copy()
        attributes["messaging.message.id"] = message.key
        # After Azure Service Bus's `messaging.servicebus.message.delivery_count`.
        attributes["messaging.hourglass.message.delivery_count"] = message.deliveries
        span: Span = self._tracer.start_span(self._name, context, api.consumer_kind, attributes)
        return span, api.in_context(span, context)

    def _producer(self, trace: Trace) -> tuple[Span, Context]:
        """The span that offered the message, and a context with it: what W3C's propagator
        extracts from the message's headers (the invalid span and no context for a
        malformed traceparent)."""
        api, state = self._api, trace.tracestate
        match = _TRACEPARENT(trace.traceparent)
        if match is None or (state is not None and len(state) > api.max_tracestate):
            carrier = {"traceparent": trace.traceparent}
            if state is not None:
                carrier["tracestate"] = state
            context = api.propagator.extract(carrier, api.no_parent)
            return api.current_span(context), context
        trace_id, span_id, flags = match.groups()
        trace_number, span_number = int(trace_id, 16), int(span_id, 16)
        if not (trace_number and span_number):
            return api.invalid_span, api.no_parent
        producer = api.non_recording_span(
            api.span_context(
                trace_number,
                span_number,
                True,
                api.trace_flags[flags],
                None if state is None else self._trace_state(state),
            )
        )
        return producer, api.in_context(producer, api.no_parent)

    def _trace_state(self, header: str) -> TraceState:
        """The TraceState of a tracestate header; one with members is kept for the next
        message with the same header (an empty one, maybe a malformed header's, is parsed
        each time, as the propagator logs each)."""
        parsed = self._states.get(header)
        if parsed is None:
            parsed = self._api.trace_state([header])
            if len(parsed):
                if len(self._states) >= _TRACE_STATES:
                    self._states.clear()
                self._states[header] = parsed
        return parsed

    def _raised(self, span: Span, error: BaseException) -> None:
        if isinstance(error, Retry):
            retry: dict[str, Any] = {"hourglass.retry.reason": error.reason}
            if error.delay is not None:
                retry["hourglass.retry.delay"] = error.delay
            span.add_event("hourglass.retry", retry)
        elif isinstance(error, Exception):  # not a cancellation or an exit
            span.record_exception(error)
            span.set_attribute("error.type", type(error).__qualname__)
            span.set_status(self._api.status(self._api.error, f"{type(error).__name__}: {error}"))

    def run(self, handler: Callable[[DeliveredMessage], object], message: DeliveredMessage) -> None:
        """`handler(message)` in the message's span."""
        api = self._api
        span, context = self._start(message)
        token = api.attach(context)
        try:
            handler(message)
        except BaseException as error:
            self._raised(span, error)
            raise
        finally:
            api.detach(token)
            span.end()

    async def run_async(
        self, handler: Callable[[DeliveredMessage], Awaitable[object]], message: DeliveredMessage
    ) -> None:
        """`await handler(message)` in the message's span."""
        api = self._api
        span, context = self._start(message)
        token = api.attach(context)
        try:
            await handler(message)
        except BaseException as error:
            self._raised(span, error)
            raise
        finally:
            api.detach(token)
            span.end()
