"""The consumer span a worker runs each handler in: a child of the span that offered the
message (docs/guide/workers.md, "Tracing").

With opentelemetry-api and no SDK configured, the API's no-op tracer makes the spans
(nothing is recorded), but a handler still runs in its producer's span context, so what
it offers carries the producer's trace on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from hourglass_client import _tracing
from hourglass_client.models.leases import DeliveredMessage
from hourglass_client.worker.handlers import Retry

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, TracerProvider

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


class Consumer:
    """Runs a handler in a CONSUMER span `process <queue>` whose parent is the span that
    offered the message (a root span when the message carries no trace), with the
    messaging attributes of OpenTelemetry's conventions. An exception is recorded on
    the span with status ERROR; a `Retry` is an event, not an error."""

    __slots__ = ("_api", "_name", "_queue", "_tracer")

    def __init__(self, api: _tracing.Api, queue: str, tracer: Any) -> None:
        self._api = api
        self._queue = queue
        self._name = f"{OPERATION} {queue}"
        self._tracer = tracer

    def _start(self, message: DeliveredMessage) -> tuple[Span, Context]:
        """The message's span, started, and the context its handler runs in: the message's
        own (its producer's span, else none) with the span in it, not the worker's."""
        api, trace = self._api, message.trace
        if trace is None:
            parent = api.no_parent
        else:
            carrier = {"traceparent": trace.traceparent}
            if trace.tracestate is not None:
                carrier["tracestate"] = trace.tracestate
            parent = api.propagator.extract(carrier)  # a malformed one: no parent
        span: Span = self._tracer.start_span(
            self._name,
            parent,
            api.consumer_kind,
            {
                "messaging.system": SYSTEM,
                "messaging.operation.type": OPERATION,
                "messaging.operation.name": OPERATION,
                "messaging.destination.name": self._queue,
                "messaging.message.id": message.key,
                # After Azure Service Bus's `messaging.servicebus.message.delivery_count`.
                "messaging.hourglass.message.delivery_count": message.deliveries,
            },
        )
        return span, api.in_context(span, parent)

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
