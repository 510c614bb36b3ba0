"""How a client reaches the service (`Options`): its URL, token, timeouts and headers, what
each request sends, and which failures are sent again and after how long."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Any, TypeVar

import httpx

from hourglass_client import _operations as operations
from hourglass_client import _tracing
from hourglass_client.errors import ConnectionFailed, HourglassError, Unavailable, error_from

__version__ = "0.1.0"

T = TypeVar("T")

DEFAULT_URL = "http://127.0.0.1:8080"
# The most one batch request may carry: the service refuses a larger one (docs/api/index.md).
MAX_BATCH = 1000
# Failures that happen before a request leaves: retrying them cannot repeat anything.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Answers that say the request was not served: a proxy's bad gateway and gateway
# timeout as well as the service's own 503.
_UNAVAILABLE = frozenset({502, 503, 504})


@dataclass(frozen=True)
class Options:
    """How a client reaches the service; `Worker` builds its own client from these."""

    url: str = DEFAULT_URL
    token: str | None = field(default=None, repr=False)  # kept out of logs
    timeout: float = 10.0
    retries: int = 3
    max_retry_wait: float = 30.0
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        url: str | None,
        token: str | None,
        timeout: float = 10.0,
        retries: int = 3,
        max_retry_wait: float = 30.0,
        headers: dict[str, str] | None = None,
    ) -> Options:
        """Options from a constructor's arguments; the URL and token default to the
        environment's HOURGLASS_URL and HOURGLASS_TOKEN."""
        return cls(
            url=(url or os.environ.get("HOURGLASS_URL") or DEFAULT_URL).rstrip("/"),
            token=token if token is not None else os.environ.get("HOURGLASS_TOKEN") or None,
            timeout=timeout,
            retries=retries,
            max_retry_wait=max_retry_wait,
            headers=dict(headers or {}),
        )

    def http_arguments(self) -> dict[str, Any]:
        headers = {"User-Agent": f"hourglass-client/{__version__}", **self.headers}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return {"base_url": self.url, "headers": headers, "timeout": self.timeout}

    def request_arguments(self, call: operations.Call[Any]) -> dict[str, Any]:
        arguments: dict[str, Any] = {"params": call.params or None}
        if call.has_body:
            arguments["json"] = call.json
        if call.traced and (trace := _tracing.headers()) is not None:
            arguments["headers"] = trace  # added to the client's own
        if call.wait:
            # A long poll is answered after up to `wait` seconds: read that much longer.
            arguments["timeout"] = httpx.Timeout(self.timeout, read=self.timeout + call.wait)
        return arguments

    def outcome(self, call: operations.Call[T], response: httpx.Response) -> T:
        """The call's result from its answer, or the error it is."""
        if response.is_success or response.status_code in call.accept:
            return call.parse(response)
        raise error_from(response)

    def retry_wait(
        self, call: operations.Call[Any], failure: HourglassError, attempt: int
    ) -> float:
        """Seconds to wait before sending `call` again after `failure`, its `attempt`-th
        (from 0); raises `failure` when it is not to be retried.

        A request that never left (no connection) is always sent again; one the service
        answered `503` (or a proxy `502`/`504`) or whose answer was lost, only when it
        is repeatable. The wait is the answer's Retry-After, else 0.5 s doubling with
        jitter, at most `max_retry_wait`.
        """
        sent = not isinstance(failure.__cause__, _NOT_SENT)
        unavailable = isinstance(failure, Unavailable) or failure.status in _UNAVAILABLE
        if attempt >= self.retries or not unavailable or (sent and not call.repeatable):
            raise failure
        after = failure.retry_after if isinstance(failure, Unavailable) else None
        if after is None:
            after = 0.5 * 2**attempt * random.uniform(0.75, 1.25)
        return min(after, self.max_retry_wait)


def connection_failed(call: operations.Call[Any], error: httpx.TransportError) -> ConnectionFailed:
    failure = ConnectionFailed(f"{call.method} {call.path}: {type(error).__name__}: {error}")
    failure.__cause__ = error
    return failure
