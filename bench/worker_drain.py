"""The client side of `bench/worker.py`: one drain of a queue in a process of its own, as a
user's worker runs, by bench's raw HTTP drain or by the client library's workers.

    python -m bench.worker_drain raw|raw-keys|async|threads --url URL --messages N \\
        --pollers W --max M

- `raw`: W tasks, each polling `max`=M and acknowledging the whole lock (`DELETE
  …/locks/{id}`), bench's drain (`bench/hourglass.py`, `ServiceWorker`), until a poll
  comes back empty;
- `raw-keys`: the same, acknowledging the poll's keys (`POST …/locks/{id}/ack`);
- `async`: `AsyncWorker` with `concurrency` W×M and a no-op coroutine handler;
- `threads`: `Worker` (a pool of W×M threads) with a no-op function.

The workers run each handler in a consumer span when opentelemetry-api is installed
(no SDK is configured here: the API's no-op spans); `--no-tracing` runs them with
`tracing=False`.

The library's workers are stopped by the handler that sees the N-th message; their
`run()` returns once everything is acknowledged. Every variant runs on the stock
asyncio event loop (the loop `hourglass-worker` and `Worker.run` use). It prints
`ready` once set up, drains when a line comes on stdin, then prints one JSON line:
messages handled, seconds, and this process's CPU seconds meanwhile.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.hourglass import QUEUE, ServiceWorker, Taken
from bench.http_client import Connection
from hourglass_client import AsyncClient, AsyncWorker, DeliveredMessage, Worker

VARIANTS = ("raw", "raw-keys", "async", "threads")


class _KeyedServiceWorker(ServiceWorker):
    """bench's raw worker, acknowledging a poll by its keys rather than the whole lock."""

    async def finish(self, taken: Taken) -> None:
        keys = [message["key"] for message in taken]
        await self.http.json(
            "POST", f"/v1/queues/{QUEUE}/locks/{taken.lock_id}/ack", {"keys": keys}
        )


async def _raw(host: str, port: int, pollers: int, limit: int, by_key: bool) -> int:
    kind = _KeyedServiceWorker if by_key else ServiceWorker
    workers = [kind(Connection(host, port)) for _ in range(pollers)]
    delivered = 0

    async def work(worker: ServiceWorker) -> None:
        nonlocal delivered
        while taken := await worker.take(limit):
            await worker.finish(taken)
            delivered += len(taken)

    try:
        await asyncio.gather(*(work(worker) for worker in workers))
    finally:
        await asyncio.gather(*(worker.close() for worker in workers))
    return delivered


class _Handled:
    """A count of handled messages that calls `stop` at the `messages`-th."""

    def __init__(self, messages: int, stop: Callable[[], None]) -> None:
        self.messages = messages
        self.stop = stop
        # next() on a count is atomic under the GIL: the handler threads share it.
        self._counter = itertools.count(1)

    def tick(self) -> None:
        if next(self._counter) == self.messages:
            self.stop()

    def total(self) -> int:
        """How many were counted (once every handler has returned)."""
        return next(self._counter) - 1


async def _async_worker(
    url: str, messages: int, concurrency: int, batch: int | None, tracing: bool
) -> int:
    async with AsyncClient(url) as client:

        async def handler(message: DeliveredMessage) -> None:
            handled.tick()

        worker = AsyncWorker(
            client, QUEUE, handler, concurrency=concurrency, batch=batch, **_tracing(tracing)
        )
        handled = _Handled(messages, worker.stop)
        await worker.run(handle_signals=False)
    return handled.total()


def _tracing(tracing: bool) -> dict[str, bool]:
    """The workers' `tracing` argument, given only to turn it off: a client from before
    tracing (`--client`) takes none."""
    return {} if tracing else {"tracing": False}


def _thread_worker(
    url: str, messages: int, concurrency: int, batch: int | None, tracing: bool
) -> int:
    def handler(message: DeliveredMessage) -> None:
        handled.tick()

    worker = Worker(url, QUEUE, handler, concurrency=concurrency, batch=batch, **_tracing(tracing))
    handled = _Handled(messages, worker.stop)
    worker.run(handle_signals=False)
    return handled.total()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("variant", choices=VARIANTS)
    parser.add_argument("--url", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--pollers", type=int, default=4)
    parser.add_argument("--max", type=int, default=100)
    parser.add_argument("--batch", type=int, help="the workers' batch (default: theirs)")
    parser.add_argument(
        "--no-tracing", action="store_true", help="the workers with tracing=False (no spans)"
    )
    args = parser.parse_args(argv)
    host, port = args.url.removeprefix("http://").rsplit(":", 1)
    concurrency = args.pollers * args.max
    tracing = not args.no_tracing

    drains: dict[str, Callable[[], Any]] = {
        "raw": lambda: asyncio.run(_raw(host, int(port), args.pollers, args.max, False)),
        "raw-keys": lambda: asyncio.run(_raw(host, int(port), args.pollers, args.max, True)),
        "async": lambda: asyncio.run(
            _async_worker(args.url, args.messages, concurrency, args.batch, tracing)
        ),
        "threads": lambda: _thread_worker(
            args.url, args.messages, concurrency, args.batch, tracing
        ),
    }
    # httpx imports its transport when the first client is made: not part of the drain.
    asyncio.run(AsyncClient(args.url).aclose())
    print("ready", flush=True)
    sys.stdin.readline()
    before, started = os.times(), time.perf_counter()
    handled = drains[args.variant]()
    seconds, after = time.perf_counter() - started, os.times()
    user, system = after.user - before.user, after.system - before.system
    print(
        json.dumps(
            {
                "messages": handled,
                "seconds": seconds,
                "cpu_seconds": user + system,
                "user_seconds": user,
                "system_seconds": system,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
