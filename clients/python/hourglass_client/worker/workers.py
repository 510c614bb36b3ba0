"""`Worker` and `AsyncWorker`: what a user builds and runs; each runs an engine
(_runners.py) with its settings checked, stopped by SIGTERM and SIGINT."""

from __future__ import annotations

import asyncio
import inspect
import logging
import signal
import threading
from typing import TYPE_CHECKING, Any

from hourglass_client.client import AsyncClient, Client, Options, __version__
from hourglass_client.models.times import Seconds, seconds
from hourglass_client.worker._engine import Engine
from hourglass_client.worker._runners import TaskEngine, ThreadEngine
from hourglass_client.worker._tracing import consumer
from hourglass_client.worker.handlers import AsyncHandler, Handler

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

logger = logging.getLogger("hourglass_client.worker")


def _check(
    concurrency: int, batch: int | None, lease: Seconds, wait: Seconds
) -> tuple[int, float, float]:
    if not 1 <= concurrency <= 1000:
        raise ValueError(f"concurrency must be 1–1000, not {concurrency}")
    if batch is None:
        # Two polls share the slots: the service answers one while the handlers run
        # the other's messages (a worker whose slots all free up at once would
        # otherwise wait for a whole poll between two rounds).
        batch = -(-concurrency // 2)
    elif not 1 <= batch <= concurrency:
        raise ValueError(f"batch must be 1–concurrency ({concurrency}), not {batch}")
    if not 1 <= seconds(lease) <= 43200:
        raise ValueError(f"lease must be 1–43200 seconds, not {seconds(lease)}")
    if not 0 <= seconds(wait) <= 20:
        raise ValueError(f"wait must be 0–20 seconds, not {seconds(wait)}")
    return batch, seconds(lease), seconds(wait)


def _engine_settings(worker: AsyncWorker | Worker) -> dict[str, Any]:
    """The engine's settings, as either worker holds them; its tracer is had here, as the
    worker starts (so a tracer provider set after the worker was made is used)."""
    return {
        "tracing": consumer(
            worker.queue,
            __version__,
            enabled=worker.tracing,
            tracer_provider=worker.tracer_provider,
        ),
        "concurrency": worker.concurrency,
        "batch": worker.batch,
        "lease": worker.lease,
        "wait": worker.wait,
        "log": worker.logger,
    }


class _Signals:
    """SIGTERM and SIGINT stop the engine while it runs (main thread only)."""

    def __init__(self, engine: Engine, enabled: bool) -> None:
        self.engine = engine
        self.enabled = enabled and threading.current_thread() is threading.main_thread()

    def __enter__(self) -> None:
        if self.enabled:
            loop = asyncio.get_running_loop()
            for number in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(number, self.engine.signalled, signal.Signals(number).name)

    def __exit__(self, *_: object) -> None:
        if self.enabled:
            loop = asyncio.get_running_loop()
            for number in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(number)


class AsyncWorker:
    """Runs `handler` (a coroutine function) on each message of `queue`, at most
    `concurrency` at a time.

    Polls ask for the free slots, at most `batch` messages each (half of `concurrency`
    by default: two polls share the slots), leased for `lease` seconds and extended
    while their handlers run. A handler that returns acknowledges
    its message; one that raises releases it: due again as the queue's `retry`
    setting says, or after the delay of a `Retry` it raised. `run()` returns after a
    stop (`stop()`, SIGTERM or SIGINT): polling stops, running handlers finish,
    messages held but not started are released. A second stop releases the running
    messages too and returns at once.

    With opentelemetry-api installed (the `otel` extra), each handler runs in a consumer
    span whose parent is the span that offered its message, made by `tracer_provider`'s
    tracer (None: the global provider's); `tracing=False` makes none
    (docs/guide/workers.md, "Tracing").
    """

    def __init__(
        self,
        client: AsyncClient,
        queue: str,
        handler: AsyncHandler,
        *,
        concurrency: int = 10,
        batch: int | None = None,
        lease: Seconds = 30.0,
        wait: Seconds = 20.0,
        logger: logging.Logger = logger,
        tracing: bool = True,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if not inspect.iscoroutinefunction(handler):
            raise TypeError("AsyncWorker runs coroutine functions; use Worker for a plain one")
        self.client = client
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch, self.lease, self.wait = _check(concurrency, batch, lease, wait)
        self.logger = logger
        self.tracing = tracing
        self.tracer_provider = tracer_provider
        self._engine: Engine | None = None

    async def run(self, *, handle_signals: bool = True) -> None:
        """Work until stopped; raises the poll's error when the service refuses it for good
        (a bad token or queue name), after draining."""
        self._engine = engine = TaskEngine(
            self.client, self.queue, self.handler, **_engine_settings(self)
        )
        with _Signals(engine, handle_signals):
            await engine.run()

    @property
    def abandoned(self) -> bool:
        """Whether a second signal stopped it without waiting for running handlers."""
        return self._engine is not None and self._engine.abandoning

    def stop(self) -> None:
        """Stop (from the worker's event loop): as SIGTERM does."""
        if self._engine is not None:
            self._engine.stop()


class Worker:
    """Runs `handler` (a plain function) on each message of `queue` in a pool of
    `concurrency` threads; otherwise as `AsyncWorker`.

    `client` is a `Client` (the worker reaches the service as it does), a URL, or None
    for HOURGLASS_URL. `run()` blocks until a stop; it installs SIGTERM and SIGINT
    handlers when called from the main thread. `stop()` may be called from any thread.
    """

    def __init__(
        self,
        client: Client | str | None,
        queue: str,
        handler: Handler,
        *,
        concurrency: int = 10,
        batch: int | None = None,
        lease: Seconds = 30.0,
        wait: Seconds = 20.0,
        token: str | None = None,
        logger: logging.Logger = logger,
        tracing: bool = True,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if inspect.iscoroutinefunction(handler):
            raise TypeError("Worker runs plain functions; use AsyncWorker for a coroutine one")
        if isinstance(client, Client):
            self.options = client.options
        else:
            self.options = Options.of(client, token)
        self.queue = queue
        self.handler = handler
        self.concurrency = concurrency
        self.batch, self.lease, self.wait = _check(concurrency, batch, lease, wait)
        self.logger = logger
        self.tracing = tracing
        self.tracer_provider = tracer_provider
        self._loop: asyncio.AbstractEventLoop | None = None
        self._engine: Engine | None = None
        self._stop_asked = threading.Event()

    def run(self, *, handle_signals: bool = True) -> None:
        """Work until stopped; see `AsyncWorker.run`."""
        asyncio.run(self._run(handle_signals))

    async def _run(self, handle_signals: bool) -> None:
        self._loop = asyncio.get_running_loop()
        async with AsyncClient.from_options(self.options) as client:
            self._engine = engine = ThreadEngine(
                client, self.queue, self.handler, **_engine_settings(self)
            )
            try:
                if self._stop_asked.is_set():
                    engine.stop()
                with _Signals(engine, handle_signals):
                    await engine.run()
            finally:
                # After a second stop, handlers may still run in their threads: not waited for.
                engine.close(wait=not engine.abandoning)

    @property
    def abandoned(self) -> bool:
        """Whether a second signal stopped it without waiting for running handlers (their
        threads may still run; `hourglass-worker` exits without them)."""
        return self._engine is not None and self._engine.abandoning

    def stop(self) -> None:
        """Stop, from any thread: as SIGTERM does."""
        self._stop_asked.set()
        loop, engine = self._loop, self._engine
        if loop is not None and engine is not None:
            loop.call_soon_threadsafe(engine.stop)
