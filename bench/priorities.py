"""Priorities (docs/decisions/0017-priorities.md): what 1,000,000 future messages over
all ten priorities cost a poll, and what mixed priorities cost a drain, through
`hourglass serve` on PostgreSQL.

    python -m bench.priorities                  # ~5 minutes: the two ratios and their bounds
    python -m bench.priorities --explain        # the poll's plans at 1,000,000 future messages
    python -m bench.priorities --quick          # 100,000 future messages: does it run?

One database (dropped and created afresh), one server, four queues in one table:
- `future`: --future messages due from a day ahead, priority n % 10, and the
  messages polled below; `plain`: only the messages polled. A round offers --polls
  due messages of priority 0 to each queue (the poll's hardest case: every higher
  priority of `future` holds future messages, each range is looked into) and times
  poll max=1 + ack of each, one after the other (which queue goes first alternates);
  the figure is the median over every round after the first. The bound:
  `future` / `plain` <= 1.5.
- `single` and `mixed`: a round fills each with --drain due messages (all priority 0,
  or priority n % 10) and drains each with 4 workers polling max=100 and
  acknowledging; the figure is the median rate over the rounds. The bound:
  `mixed` at most 1.2x slower than `single`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import psycopg
from sqlalchemy import create_engine

from bench.hourglass import LEASE_SECONDS, ServiceWorker, fresh_database, now_ms
from bench.http_client import Connection, event_loop_factory
from tests.support.server import running_server

_FILL = (
    'INSERT INTO delayed_queue ("pKey", "pKind", payload, "scheduledAt", '
    '"scheduledAtInitially", "createdAt", priority) '
    "SELECT %(prefix)s || g, %(queue)s, '{}'::bytea, %(due)s + g, %(due)s + g, %(now)s, "
    "CASE WHEN %(mixed)s THEN g %% 10 ELSE 0 END FROM generate_series(1, %(count)s) AS g"
)


def _fill(dsn: str, queue: str, count: int, due: int, *, mixed: bool, prefix: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            _FILL,
            {
                "prefix": prefix,
                "queue": queue,
                "due": due,
                "now": now_ms(),
                "mixed": mixed,
                "count": count,
            },
        )


def _analyse(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("VACUUM ANALYZE delayed_queue")


class _Worker(ServiceWorker):
    def __init__(self, port: int, queue: str) -> None:
        super().__init__(Connection("127.0.0.1", port))
        self.queue = queue

    async def poll(self, limit: int) -> dict[str, Any]:
        return await self.http.json(
            "POST", f"/v1/queues/{self.queue}/poll", {"max": limit, "lease": LEASE_SECONDS}
        )

    async def ack(self, lock_id: str) -> None:
        await self.http.json("DELETE", f"/v1/queues/{self.queue}/locks/{lock_id}", expect=(204,))


async def _latencies(port: int, queue: str, polls: int) -> list[float]:
    worker = _Worker(port, queue)
    timings = []
    try:
        for _ in range(polls):
            started = time.perf_counter()
            answer = await worker.poll(1)
            assert answer["messages"], f"nothing due in {queue}"
            await worker.ack(answer["lock_id"])
            timings.append(time.perf_counter() - started)
    finally:
        await worker.close()
    return timings


async def _drain(port: int, queue: str, workers_count: int = 4) -> float:
    """Messages a second of `workers_count` workers polling max=100 until `queue` is empty."""
    workers = [_Worker(port, queue) for _ in range(workers_count)]
    drained = 0

    async def drain(worker: _Worker) -> None:
        nonlocal drained
        while (answer := await worker.poll(100))["messages"]:
            drained += len(answer["messages"])
            await worker.ack(answer["lock_id"])

    started = time.perf_counter()
    try:
        await asyncio.gather(*(drain(worker) for worker in workers))
    finally:
        for worker in workers:
            await worker.close()
    return drained / (time.perf_counter() - started)


def measure(dsn: str, future: int, polls: int, drain: int, rounds: int) -> dict[str, Any]:
    fresh_database(dsn)
    with running_server(dsn) as server, asyncio.Runner(loop_factory=event_loop_factory()) as loop:
        started = time.perf_counter()
        _fill(dsn, "future", future, now_ms() + 86_400_000, mixed=True, prefix="future-")
        _analyse(dsn)
        print(f"{future:,} future messages in {time.perf_counter() - started:.0f} s", flush=True)
        latency: dict[str, list[float]] = {"future": [], "plain": []}
        rates: dict[str, list[float]] = {"single": [], "mixed": []}
        for number in range(rounds + 1):
            due = now_ms() - 60_000
            for queue in ("future", "plain"):
                _fill(dsn, queue, polls, due, mixed=False, prefix=f"due-{number}-")
            for queue in ("single", "mixed"):
                _fill(dsn, queue, drain, due, mixed=queue == "mixed", prefix=f"drain-{number}-")
            _analyse(dsn)
            order = ("future", "plain") if number % 2 else ("plain", "future")
            for queue in order:
                timings = loop.run(_latencies(server.port, queue, polls))
                if number:  # the first round warms up
                    latency[queue] += timings
            for queue in ("single", "mixed") if number % 2 else ("mixed", "single"):
                rate = loop.run(_drain(server.port, queue))
                if number:
                    rates[queue].append(rate)
            print(
                f"round {number}: drain "
                + ", ".join(f"{queue} {rate[-1]:,.0f}/s" for queue, rate in rates.items() if rate),
                flush=True,
            )
    medians = {queue: statistics.median(values) * 1000 for queue, values in latency.items()}
    drains = {queue: statistics.median(values) for queue, values in rates.items()}
    return {
        "future": future,
        "latency_ms": medians,
        "latency_ratio": medians["future"] / medians["plain"],
        "drain_per_second": drains,
        "drain_slowdown": drains["single"] / drains["mixed"],
        "rounds": rounds,
    }


def explain(dsn: str, future: int, due: int = 1000) -> None:
    """The poll's statement as the service sends it, EXPLAIN (ANALYZE, BUFFERS), for max=1
    and max=100, in a transaction rolled back, over `future` future messages of every
    priority and `due` due ones of priority 0 (behind nine ranges of future ones)."""
    from app.config import normalize_database_url
    from app.storage.dialects.postgresql import PostgreSQLDialect
    from app.storage.schema import upgrade_to_head

    fresh_database(dsn)
    url = normalize_database_url(dsn)
    upgrade_to_head(url)
    _fill(dsn, "orders", future, now_ms() + 86_400_000, mixed=True, prefix="future-")
    _fill(dsn, "orders", due, now_ms() - 60_000, mixed=False, prefix="due-")
    _analyse(dsn)
    engine = create_engine(url.replace("+psycopg_async", "+psycopg"))
    try:
        for limit in (1, 100):
            statement = PostgreSQLDialect.statements.leases.claims[False, limit > 1]
            compiled = statement.compile(dialect=engine.dialect)
            parameters = {
                **compiled.params,
                "queue": "orders",
                "now": now_ms(),
                "limit": limit,
                "lock_id": str(uuid.uuid4()),
                "lease_until": now_ms() + 30_000,
                "max_bytes": 16 * 1024 * 1024,
            }
            with engine.connect() as connection:
                transaction = connection.begin()
                plan = connection.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, BUFFERS) {compiled.string}", parameters
                ).all()
                transaction.rollback()
            print(f"\n-- poll max={limit}, {future:,} future messages over ten priorities")
            print("\n".join(row[0] for row in plan))
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database-url", default="postgresql://root@127.0.0.1:5432/hourglass_bench_priorities"
    )
    parser.add_argument("--future", type=int, default=1_000_000)
    parser.add_argument("--polls", type=int, default=200, help="poll+ack per queue and round")
    parser.add_argument("--drain", type=int, default=20_000, help="messages per drain")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.future, args.polls, args.drain, args.rounds = 100_000, 50, 5_000, 2
    if args.explain:
        explain(args.database_url, args.future)
        return
    result = measure(args.database_url, args.future, args.polls, args.drain, args.rounds)
    latency, drains = result["latency_ms"], result["drain_per_second"]
    print(
        f"poll max=1 + ack, {args.future:,} future messages over 10 priorities: "
        f"{latency['future']:.2f} ms; none: {latency['plain']:.2f} ms; "
        f"ratio {result['latency_ratio']:.2f} (bound: <= 1.5)"
    )
    print(
        f"drain max=100, 4 workers: single priority {drains['single']:,.0f} msg/s, "
        f"mixed {drains['mixed']:,.0f} msg/s; mixed {result['drain_slowdown']:.2f}x slower "
        "(bound: <= 1.2)"
    )


if __name__ == "__main__":
    main()
