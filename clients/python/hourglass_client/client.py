"""`Client` and `AsyncClient`: the /v1 operations of `_operations` over httpx, with retries."""

from __future__ import annotations

import asyncio
import functools
import os
import random
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx

from hourglass_client import _operations as operations
from hourglass_client import _tracing
from hourglass_client.errors import ConnectionFailed, HourglassError, Unavailable, error_from
from hourglass_client.models.messages import (
    BatchResult,
    Finish,
    HistoryEntry,
    IfExists,
    ListState,
    Message,
    Offer,
)

__version__ = "0.1.0"

P = ParamSpec("P")
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


def _connection_failed(call: operations.Call[Any], error: httpx.TransportError) -> ConnectionFailed:
    failure = ConnectionFailed(f"{call.method} {call.path}: {type(error).__name__}: {error}")
    failure.__cause__ = error
    return failure


def _blocking(build: Callable[P, operations.Call[T]]) -> Callable[Concatenate[Client, P], T]:
    """A `Client` method that sends what `build` makes."""

    @functools.wraps(build)
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.send(build(*args, **kwargs))

    return method


def _awaitable(
    build: Callable[P, operations.Call[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    """An `AsyncClient` method that sends what `build` makes."""

    @functools.wraps(build)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.send(build(*args, **kwargs))

    return method


def _chunks(offers: Iterable[Offer], size: int) -> Iterator[list[Offer]]:
    if not 1 <= size <= MAX_BATCH:
        raise ValueError(f"batch_size must be 1–{MAX_BATCH}, not {size}")
    items = iter(offers)
    while chunk := list(islice(items, size)):
        yield chunk


class Client:
    """The Hourglass API over HTTP, blocking. Thread-safe; use one per process and close it
    (or use it as a context manager).

    `url` and `token` default to HOURGLASS_URL (else http://127.0.0.1:8080) and
    HOURGLASS_TOKEN; `timeout` is in seconds (a long poll's wait is added to it);
    failed calls that are safe to repeat are sent again up to `retries` times.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        max_retry_wait: float = 30.0,
        headers: dict[str, str] | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.options = Options.of(url, token, timeout, retries, max_retry_wait, headers)
        self._http = httpx.Client(transport=transport, **self.options.http_arguments())

    def send(self, call: operations.Call[T]) -> T:
        """Send one operation, with the retries it allows; its result."""
        for attempt in range(self.options.retries + 1):
            try:
                response = self._http.request(
                    call.method, call.path, **self.options.request_arguments(call)
                )
            except httpx.TransportError as error:
                failure: HourglassError = _connection_failed(call, error)
            else:
                try:
                    return self.options.outcome(call, response)
                except HourglassError as error:
                    failure = error
            time.sleep(self.options.retry_wait(call, failure, attempt))
        raise AssertionError("unreachable: the last attempt raises")

    offer = _blocking(operations.offer)
    update = _blocking(operations.update)
    create = _blocking(operations.create)
    get = _blocking(operations.get)
    delete = _blocking(operations.delete)
    list_messages = _blocking(operations.list_messages)
    history = _blocking(operations.history)
    poll = _blocking(operations.poll)
    ack = _blocking(operations.ack)
    ack_keys = _blocking(operations.ack_keys)
    extend = _blocking(operations.extend)
    release = _blocking(operations.release)
    release_keys = _blocking(operations.release_keys)
    queues = _blocking(operations.queues)
    stats = _blocking(operations.stats)
    pause = _blocking(operations.pause)
    resume = _blocking(operations.resume)
    purge = _blocking(operations.purge)
    get_settings = _blocking(operations.get_settings)
    put_settings = _blocking(operations.put_settings)
    redrive = _blocking(operations.redrive)
    install_cron = _blocking(operations.install_cron)
    cron_entries = _blocking(operations.cron_entries)
    get_cron = _blocking(operations.get_cron)
    pause_cron = _blocking(operations.pause_cron)
    resume_cron = _blocking(operations.resume_cron)
    uninstall_cron = _blocking(operations.uninstall_cron)

    def offer_many(
        self,
        queue: str,
        offers: Iterable[Offer],
        *,
        if_exists: IfExists = "update",
        batch_size: int = MAX_BATCH,
    ) -> BatchResult:
        """Offer any number of messages, `batch_size` (≤ 1000) per request; the outcomes in
        input order. Each batch is written whole or not at all; when one fails, the
        batches before it stay written."""
        return BatchResult.combined(
            [
                self.send(operations.batch(queue, chunk, if_exists))
                for chunk in _chunks(offers, batch_size)
            ]
        )

    def iter_messages(
        self,
        queue: str,
        *,
        state: ListState | None = None,
        prefix: str | None = None,
        group: str | None = None,
        page_size: int = 100,
    ) -> Iterator[Message]:
        """Every message of the queue (of `state`, under `prefix`, of `group`), a page at a
        time."""
        cursor: str | None = None
        while True:
            page = self.list_messages(
                queue, state=state, prefix=prefix, group=group, limit=page_size, cursor=cursor
            )
            yield from page.items
            if (cursor := page.next) is None:
                return

    def iter_history(
        self,
        queue: str,
        *,
        key: str | None = None,
        outcome: Finish | None = None,
        page_size: int = 100,
    ) -> Iterator[HistoryEntry]:
        """The queue's whole delivery history (of `key`, of `outcome`), newest first."""
        cursor: str | None = None
        while True:
            page = self.history(queue, key=key, outcome=outcome, limit=page_size, cursor=cursor)
            yield from page.items
            if (cursor := page.next) is None:
                return

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClient:
    """The Hourglass API over HTTP, for asyncio: `Client`'s methods, awaited."""

    def __init__(
        self,
        url: str | None = None,
        *,
        token: str | None = None,
        timeout: float = 10.0,
        retries: int = 3,
        max_retry_wait: float = 30.0,
        headers: dict[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.options = Options.of(url, token, timeout, retries, max_retry_wait, headers)
        self._http = httpx.AsyncClient(transport=transport, **self.options.http_arguments())

    @classmethod
    def from_options(
        cls, options: Options, transport: httpx.AsyncBaseTransport | None = None
    ) -> AsyncClient:
        """A client that reaches the service as `options` say (another client's `options`)."""
        return cls(
            options.url,
            token=options.token,
            timeout=options.timeout,
            retries=options.retries,
            max_retry_wait=options.max_retry_wait,
            headers=options.headers,
            transport=transport,
        )

    async def send(self, call: operations.Call[T]) -> T:
        """Send one operation, with the retries it allows; its result."""
        for attempt in range(self.options.retries + 1):
            try:
                response = await self._http.request(
                    call.method, call.path, **self.options.request_arguments(call)
                )
            except httpx.TransportError as error:
                failure: HourglassError = _connection_failed(call, error)
            else:
                try:
                    return self.options.outcome(call, response)
                except HourglassError as error:
                    failure = error
            await asyncio.sleep(self.options.retry_wait(call, failure, attempt))
        raise AssertionError("unreachable: the last attempt raises")

    offer = _awaitable(operations.offer)
    update = _awaitable(operations.update)
    create = _awaitable(operations.create)
    get = _awaitable(operations.get)
    delete = _awaitable(operations.delete)
    list_messages = _awaitable(operations.list_messages)
    history = _awaitable(operations.history)
    poll = _awaitable(operations.poll)
    ack = _awaitable(operations.ack)
    ack_keys = _awaitable(operations.ack_keys)
    extend = _awaitable(operations.extend)
    release = _awaitable(operations.release)
    release_keys = _awaitable(operations.release_keys)
    queues = _awaitable(operations.queues)
    stats = _awaitable(operations.stats)
    pause = _awaitable(operations.pause)
    resume = _awaitable(operations.resume)
    purge = _awaitable(operations.purge)
    get_settings = _awaitable(operations.get_settings)
    put_settings = _awaitable(operations.put_settings)
    redrive = _awaitable(operations.redrive)
    install_cron = _awaitable(operations.install_cron)
    cron_entries = _awaitable(operations.cron_entries)
    get_cron = _awaitable(operations.get_cron)
    pause_cron = _awaitable(operations.pause_cron)
    resume_cron = _awaitable(operations.resume_cron)
    uninstall_cron = _awaitable(operations.uninstall_cron)

    async def offer_many(
        self,
        queue: str,
        offers: Iterable[Offer],
        *,
        if_exists: IfExists = "update",
        batch_size: int = MAX_BATCH,
    ) -> BatchResult:
        """Offer any number of messages, `batch_size` (≤ 1000) per request, one request at a
        time; the outcomes in input order (see `Client.offer_many`)."""
        parts: list[BatchResult] = []
        for chunk in _chunks(offers, batch_size):
            parts.append(await self.send(operations.batch(queue, chunk, if_exists)))
        return BatchResult.combined(parts)

    async def iter_messages(
        self,
        queue: str,
        *,
        state: ListState | None = None,
        prefix: str | None = None,
        group: str | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[Message]:
        """Every message of the queue (of `state`, under `prefix`, of `group`), a page at a
        time."""
        cursor: str | None = None
        while True:
            page = await self.list_messages(
                queue, state=state, prefix=prefix, group=group, limit=page_size, cursor=cursor
            )
            for message in page.items:
                yield message
            if (cursor := page.next) is None:
                return

    async def iter_history(
        self,
        queue: str,
        *,
        key: str | None = None,
        outcome: Finish | None = None,
        page_size: int = 100,
    ) -> AsyncIterator[HistoryEntry]:
        """The queue's whole delivery history (of `key`, of `outcome`), newest first."""
        cursor: str | None = None
        while True:
            page = await self.history(
                queue, key=key, outcome=outcome, limit=page_size, cursor=cursor
            )
            for entry in page.items:
                yield entry
            if (cursor := page.next) is None:
                return

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()


__all__ = ["AsyncClient", "Client", "Options"]
