"""What a handler is: the plain and coroutine functions the workers run on each message,
and `Retry`, which a handler raises to give its message back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from hourglass_client.models.leases import DeliveredMessage
from hourglass_client.models.times import Seconds, seconds

Handler = Callable[[DeliveredMessage], object]
AsyncHandler = Callable[[DeliveredMessage], Awaitable[object]]


class Retry(Exception):
    """Raise from a handler to give its message back without an error being logged as one:
    due again after `delay` seconds, or, without a delay, when the queue's `retry`
    setting says (at once when it has none)."""

    def __init__(self, delay: Seconds | None = None, reason: str = "") -> None:
        super().__init__(reason or "retry")
        self.delay = None if delay is None else seconds(delay)
        self.reason = reason
