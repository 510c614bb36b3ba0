"""Message groups (docs/guide/flow-control.md, docs/decisions/0027-message-groups.md): what groups
cost a poll and a drain, through `hourglass serve` on PostgreSQL.

    python -m bench.groups                  # ~10 minutes: the two ratios
    python -m bench.groups --explain        # the claim's and the keeper's plans at 1,000,000
    python -m bench.groups --quick          # 100,000 messages: does it run?

One database (dropped and created afresh), one server, four queues in one table:
- `grouped`: --ready due messages in --groups groups (each group's earliest in its front,
  the rest waiting, as the keeper leaves them), group_concurrency 1; `plain`: as many
  due messages without a group. A round times poll max=1 + ack, --polls of each queue,
  one after the other (which queue goes first alternates); each acknowledgement in
  `grouped` frees its group's place, which the keeper fills. The figure is the median
  over every round after the first. Bound: `grouped` / `plain` <= 1.5.
- `grouped-drain` and `single`: a round fills each with --drain due messages (in
  --drain-groups groups, or none) and drains each with 4 workers polling max=100 and
  acknowledging; the figure is the median rate over the rounds. Bound: `grouped-drain`
  at least 0.7x `single`.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import httpx
import psycopg
from sqlalchemy import create_engine

from bench.hourglass import LEASE_SECONDS, fresh_database, now_ms
from bench.http_client import event_loop_factory
from bench.priorities import _analyse, _latencies, _Worker
from tests.support.server import running_server

# Message g of a queue: due at `due` + g, in group g % groups (none when groups is 0).
# A group's earliest is its first g; it stands in the front (priority 0), the rest wait
# (priority stored as -1), as the keeper leaves a group of due messages.
_FILL = (
    'INSERT INTO delayed_queue ("pKey", "pKind", payload, "scheduledAt", '
    '"scheduledAtInitially", "createdAt", priority, "messageGroup") '
    "SELECT %(prefix)s || g, %(queue)s, '{}'::bytea, %(due)s + g, %(due)s + g, %(now)s, "
    "CASE WHEN %(groups)s = 0 OR g <= %(groups)s THEN 0 ELSE -1 END, "
    "CASE WHEN %(groups)s = 0 THEN NULL ELSE 'customer-' || (g %% %(groups)s) END "
    "FROM generate_series(1, %(count)s) AS g"
)


def _fill(dsn: str, queue: str, count: int, due: int, *, groups: int, prefix: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute(
            _FILL,
            {
                "prefix": prefix,
                "queue": queue,
                "due": due,
                "now": now_ms(),
                "groups": groups,
                "count": count,
            },
        )


async def _drain(port: int, queue: str, total: int, workers_count: int = 4) -> float:
    """Messages a second of `workers_count` workers polling max=100 until all `total` of
    `queue` are acknowledged. A grouped queue may answer a poll empty while the keeper
    fills fronts: a worker polls again (wait 1 s: it wakes when the front gains some)."""
    workers = [_Worker(port, queue) for _ in range(workers_count)]
    drained = 0

    async def drain(worker: _Worker) -> None:
        nonlocal drained
        while drained < total:
            answer = await worker.http.json(
                "POST",
                f"/v1/queues/{queue}/poll",
                {"max": 100, "lease": LEASE_SECONDS, "wait": 1},
            )
            if answer["messages"]:
                drained += len(answer["messages"])
                await worker.ack(answer["lock_id"])

    started = time.perf_counter()
    try:
        await asyncio.gather(*(drain(worker) for worker in workers))
    finally:
        for worker in workers:
            await worker.close()
    return drained / (time.perf_counter() - started)


def _settings(url: str, queue: str) -> None:
    answer = httpx.put(f"{url}/v1/queues/{queue}/settings", json={"group_concurrency": 1})
    answer.raise_for_status()


def measure(
    dsn: str, ready: int, groups: int, polls: int, drain: int, drain_groups: int, rounds: int
) -> dict[str, Any]:
    fresh_database(dsn)
    with running_server(dsn) as server, asyncio.Runner(loop_factory=event_loop_factory()) as loop:
        for queue in ("grouped", "grouped-drain"):
            _settings(server.url, queue)
        started = time.perf_counter()
        due = now_ms() - 3_600_000
        _fill(dsn, "grouped", ready, due, groups=groups, prefix="grouped-")
        _fill(dsn, "plain", ready, due, groups=0, prefix="plain-")
        _analyse(dsn)
        print(f"2 x {ready:,} due messages in {time.perf_counter() - started:.0f} s", flush=True)
        latency: dict[str, list[float]] = {"grouped": [], "plain": []}
        rates: dict[str, list[float]] = {"single": [], "grouped-drain": []}
        for number in range(rounds + 1):
            for queue, count in (("single", 0), ("grouped-drain", drain_groups)):
                _fill(dsn, queue, drain, due, groups=count, prefix=f"drain-{number}-")
            _analyse(dsn)
            order = ("grouped", "plain") if number % 2 else ("plain", "grouped")
            for queue in order:
                timings = loop.run(_latencies(server.port, queue, polls))
                if number:  # the first round warms up
                    latency[queue] += timings
            for queue in ("single", "grouped-drain") if number % 2 else ("grouped-drain", "single"):
                rate = loop.run(_drain(server.port, queue, drain))
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
        "latency_ms": medians,
        "latency_ratio": medians["grouped"] / medians["plain"],
        "drain_per_second": drains,
        "drain_ratio": drains["grouped-drain"] / drains["single"],
    }


def explain(dsn: str, ready: int, groups: int) -> None:
    """The claim as the service sends it (max=1 and max=100) and the keeper's read of 100
    groups' waiting messages, EXPLAIN (ANALYZE, BUFFERS), in a transaction rolled back,
    over `ready` due messages in `groups` groups."""
    from app.config import normalize_database_url
    from app.storage.dialects.postgresql import PostgreSQLDialect
    from app.storage.schema import upgrade_to_head

    fresh_database(dsn)
    url = normalize_database_url(dsn)
    upgrade_to_head(url)
    _fill(dsn, "orders", ready, now_ms() - 3_600_000, groups=groups, prefix="grouped-")
    _analyse(dsn)
    engine = create_engine(url.replace("+psycopg_async", "+psycopg"))
    statements = PostgreSQLDialect.statements
    try:
        runs = [
            (
                f"poll max={limit}, {ready:,} due messages in {groups:,} groups",
                statements.leases.claims[False, limit > 1],
                {
                    "queue": "orders",
                    "now": now_ms(),
                    "limit": limit,
                    "lock_id": str(uuid.uuid4()),
                    "lease_until": now_ms() + 30_000,
                    "max_bytes": 16 * 1024 * 1024,
                },
            )
            for limit in (1, 100)
        ]
        runs.append(
            (
                "the keeper: 100 groups' first waiting messages (group_concurrency 1)",
                statements.groups.groups_waiting,
                {
                    "queue": "orders",
                    "groups": [f"customer-{n}" for n in range(100)],
                    "limit": 1,
                },
            )
        )
        for title, statement, parameters in runs:
            compiled = statement.compile(dialect=engine.dialect)
            with engine.connect() as connection:
                transaction = connection.begin()
                plan = connection.exec_driver_sql(
                    f"EXPLAIN (ANALYZE, BUFFERS) {compiled.string}",
                    {**compiled.params, **parameters},
                ).all()
                transaction.rollback()
            print(f"\n-- {title}")
            print("\n".join(row[0] for row in plan))
    finally:
        engine.dispose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database-url", default="postgresql://root@127.0.0.1:5432/hourglass_bench_groups"
    )
    parser.add_argument("--ready", type=int, default=1_000_000)
    parser.add_argument("--groups", type=int, default=10_000)
    parser.add_argument("--polls", type=int, default=200, help="poll+ack per queue and round")
    parser.add_argument("--drain", type=int, default=20_000, help="messages per drain")
    parser.add_argument("--drain-groups", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--explain", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.ready, args.groups, args.polls, args.drain, args.rounds = 100_000, 1_000, 50, 5_000, 2
    if args.explain:
        explain(args.database_url, args.ready, args.groups)
        return
    with open("/proc/loadavg") as load:
        print(f"load average at the start: {load.read().split()[0]}", flush=True)
    result = measure(
        args.database_url,
        args.ready,
        args.groups,
        args.polls,
        args.drain,
        args.drain_groups,
        args.rounds,
    )
    latency, drains = result["latency_ms"], result["drain_per_second"]
    print(
        f"poll max=1 + ack, {args.ready:,} due messages in {args.groups:,} groups: "
        f"{latency['grouped']:.2f} ms; without groups: {latency['plain']:.2f} ms; "
        f"ratio {result['latency_ratio']:.2f} (bound: <= 1.5)"
    )
    print(
        f"drain max=100, 4 workers, {args.drain:,} messages: in {args.drain_groups:,} groups "
        f"{drains['grouped-drain']:,.0f} msg/s, without groups {drains['single']:,.0f} msg/s; "
        f"ratio {result['drain_ratio']:.2f} (bound: >= 0.7)"
    )


if __name__ == "__main__":
    main()
