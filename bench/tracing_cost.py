"""What a worker's consumer span costs per message, in this process: opentelemetry-api and
no SDK configured (the API's no-op spans), the path `Worker` and `AsyncWorker` take for
each handler (hourglass_client/worker/_tracing.py) against a plain call of the handler
(`tracing=False`), with a no-op handler.

    python -m bench.tracing_cost              # µs a message: off, untraced, traced
    python -m bench.tracing_cost --calls      # and Python calls a message (cProfile)
    python -m bench.tracing_cost --quick      # a few messages: that it runs (tests/bench)

Rows: `off`, the handler called as the workers call it with `tracing=False`; `untraced`,
in a span, for a message that carries no trace (a root span); `traced`, for one that
carries a `traceparent` (its producer's span the parent); `traced, tracestate`, with a
`tracestate` of two members too. Each figure is this process's CPU time a message (so
what else runs on the machine counts less), the median over `--repeats` timings of
`--number` messages; `+` is what tracing adds to `off`. Only the span's path is
measured: polls, acknowledgements and the event loop are not (`python -m bench.worker
--tracing` measures the workers whole, over HTTP).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
import timeit
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from hourglass_client import DeliveredMessage, __version__
from hourglass_client.models.messages import Trace
from hourglass_client.worker._tracing import consumer

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACESTATE = "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"


def message(trace: Trace | None) -> DeliveredMessage:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return DeliveredMessage(
        queue="q",
        key="k",
        payload={},
        scheduled_at=now,
        scheduled_at_initially=now,
        created_at=now,
        state="leased",
        deliveries=1,
        dead_lettered_from=None,
        priority=0,
        group=None,
        expires_at=None,
        expired=False,
        trace=trace,
        delivery="first",
        lease_expires_at=now,
        lock_id="lock",
    )


def handler(message: DeliveredMessage) -> None:
    pass


async def coroutine_handler(message: DeliveredMessage) -> None:
    pass


def drive(coroutine: Any) -> None:
    """Run a coroutine that never waits, without an event loop."""
    try:
        coroutine.send(None)
    except StopIteration:
        pass


def paths() -> dict[str, tuple[Callable[[], None], Callable[[], None]]]:
    """Each row's one message, through `Worker`'s path and through `AsyncWorker`'s."""
    spans = consumer("q", __version__)
    if spans is None:
        sys.exit("opentelemetry-api is not importable: no spans to measure")
    rows: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}
    plain = message(None)
    rows["off"] = (lambda: handler(plain), lambda: drive(coroutine_handler(plain)))
    for name, trace in (
        ("untraced", None),
        ("traced", Trace(TRACEPARENT)),
        ("traced, tracestate", Trace(TRACEPARENT, TRACESTATE)),
    ):
        one = message(trace)
        rows[name] = (
            lambda one=one: spans.run(handler, one),
            lambda one=one: drive(spans.run_async(coroutine_handler, one)),
        )
    return rows


def calls(path: Callable[[], None], number: int = 1000) -> float:
    """Python function calls a message (cProfile's count, builtins included)."""
    profile = cProfile.Profile()
    profile.runcall(lambda: [path() for _ in range(number)])
    return (pstats.Stats(profile).total_calls - 2) / number  # less the lambda and list


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--number", type=int, default=100_000, help="messages a timing")
    parser.add_argument("--repeats", type=int, default=7, help="timings a figure (median)")
    parser.add_argument("--calls", action="store_true", help="Python calls a message too")
    parser.add_argument("--quick", action="store_true", help="1,000 messages, 3 timings")
    args = parser.parse_args(argv)
    if args.quick:
        args.number, args.repeats = 1000, 3
    rows = paths()
    figures = {
        name: [
            1e6
            * statistics.median(
                timeit.repeat(path, time.process_time, number=args.number, repeat=args.repeats)
            )
            / args.number
            for path in both
        ]
        for name, both in rows.items()
    }
    print(
        "| message | Worker µs (+ tracing) | AsyncWorker µs (+ tracing) |"
        + (" calls, Worker / AsyncWorker |" if args.calls else "")
    )
    print("|---|---|---|" + ("---|" if args.calls else ""))
    for name, both in figures.items():
        cells = [
            f"{us:.2f}" + ("" if name == "off" else f" (+{us - off:.2f})")
            for us, off in zip(both, figures["off"], strict=True)
        ]
        if args.calls:
            cells.append(" / ".join(f"{calls(path):.0f}" for path in rows[name]))
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
