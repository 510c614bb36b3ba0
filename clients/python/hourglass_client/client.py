"""`Client` and `AsyncClient`: the /v1 operations of `_operations` over httpx, with retries."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Iterator
from itertools import islice
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx

from hourglass_client import _operations as operations
from hourglass_client._options import (
    DEFAULT_URL,
    MAX_BATCH,
    Options,
    __version__,
    connection_failed,
)
from hourglass_client.errors import HourglassError
from hourglass_client.models.leases import Ack, Lease
from hourglass_client.models.messages import (
    BatchResult,
    Finish,
    HistoryEntry,
    IfExists,
    ListState,
    Message,
    Offer,
)
from hourglass_client.models.times import Seconds

P = ParamSpec("P")
T = TypeVar("T")


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
                failure: HourglassError = connection_failed(call, error)
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

    async def send(
        self, call: operations.Call[T], *, answer_begun: Callable[[], object] | None = None
    ) -> T:
        """Send one operation, with the retries it allows; its result. `answer_begun()` is
        called as each answer begins (its headers in, its body not yet read)."""
        for attempt in range(self.options.retries + 1):
            try:
                response = await self._request(call, answer_begun)
            except httpx.TransportError as error:
                failure: HourglassError = connection_failed(call, error)
            else:
                try:
                    return self.options.outcome(call, response)
                except HourglassError as error:
                    failure = error
            await asyncio.sleep(self.options.retry_wait(call, failure, attempt))
        raise AssertionError("unreachable: the last attempt raises")

    async def _request(
        self, call: operations.Call[Any], answer_begun: Callable[[], object] | None
    ) -> httpx.Response:
        arguments = self.options.request_arguments(call)
        if answer_begun is None:
            return await self._http.request(call.method, call.path, **arguments)
        request = self._http.build_request(call.method, call.path, **arguments)
        response = await self._http.send(request, stream=True)
        try:
            answer_begun()
            await response.aread()
        finally:
            await response.aclose()
        return response

    offer = _awaitable(operations.offer)
    update = _awaitable(operations.update)
    create = _awaitable(operations.create)
    get = _awaitable(operations.get)
    delete = _awaitable(operations.delete)
    list_messages = _awaitable(operations.list_messages)
    history = _awaitable(operations.history)

    async def poll(
        self,
        queue: str,
        *,
        max: int = 1,
        wait: Seconds = 0,
        lease: Seconds | None = None,
        ack: Ack | str | None = None,
        answer_begun: Callable[[], object] | None = None,
    ) -> Lease:
        """As `Client.poll`; `answer_begun()` is called once the answer has begun (the
        service has claimed its messages): a caller that cancels the poll only before then
        leaves nothing leased to a lock it never saw, as the workers do when they stop."""
        call = operations.poll(queue, max=max, wait=wait, lease=lease, ack=ack)
        return await self.send(call, answer_begun=answer_begun)

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


__all__ = ["DEFAULT_URL", "AsyncClient", "Client", "Options", "__version__"]
