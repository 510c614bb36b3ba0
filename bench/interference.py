"""Two workloads users ask about (issue 19): what one queue's backlog does to another
queue's polls (a noisy neighbour), and what a transaction left open does to a drain
(a held snapshot)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import psycopg

from bench.accounting import percentile
from bench.hourglass import QUEUE, now_ms
from bench.report import Measurement, Row
from bench.targets import PAYLOAD, Target
from bench.workloads import Bench

NEIGHBOUR = "neighbour"  # queue A; queue B is bench.hourglass.QUEUE, which the workers poll
WARM_UP_POLLS = 10
SNAPSHOT_WORKERS = 4
SNAPSHOT_LIMIT = 100
SNAPSHOT_STARTS_AT = 0.25  # of the drain's messages delivered when the snapshot is taken


async def noisy_neighbour(bench: Bench) -> None:
    """Queue B's poll max=1 + ack latency beside queue A's ready messages, against B alone."""
    plan = bench.plan
    targets: list[Target] = [bench.service, bench.ceiling]

    async def latency(target: Target) -> dict[str, Measurement]:
        await _refill_quiet_queue(bench.dsn, target, plan.neighbour_quiet)
        worker = await target.worker()
        for _ in range(WARM_UP_POLLS):
            await worker.finish(await worker.take(1))
        timings: list[float] = []
        bench.cpu.start()
        for _ in range(plan.neighbour_polls):
            started = time.perf_counter()
            taken = await worker.take(1)
            await worker.finish(taken)
            timings.append(time.perf_counter() - started)
            if not taken:  # B must hold more than the polls take: each one times a claim
                raise RuntimeError("queue B ran out of messages: raise neighbour_quiet")
        cpu = bench.cpu.stop()
        await worker.close()
        return {
            ": p50 ms": Measurement(percentile(timings, 0.5) * 1000, cpu),
            ": p99 ms": Measurement(percentile(timings, 0.99) * 1000, cpu),
        }

    quiet = f"noisy neighbour: queue B ({plan.neighbour_quiet:,} ready) poll max=1 + ack"
    await bench.service.clear()
    alone = await bench.compare(f"{quiet}, B alone", "ms", latency, targets)
    beside_what = f"{plan.neighbour_ready:,} ready in queue A"
    await _fill_neighbour(bench.dsn, plan.neighbour_ready)
    beside = await bench.compare(f"{quiet}, beside {beside_what}", "ms", latency, targets)
    for with_a, without_a in zip(beside, alone, strict=True):
        label = with_a.name.rsplit(": ", 1)[1].removesuffix(" ms")
        bench._add(
            Row(
                f"noisy neighbour: queue B beside {beside_what} / B alone: {label}",
                "x",
                _ratio(with_a.service, without_a.service),
                _ratio(with_a.ceiling, without_a.ceiling),
                {},
            )
        )
    await bench.service.clear()  # a million rows would weigh on the workloads after this one


async def _refill_quiet_queue(dsn: str, target: Target, count: int) -> None:
    """Queue B holds `count` ready messages and nothing else, the table vacuumed."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute('DELETE FROM delayed_queue WHERE "pKind" = %s', (QUEUE,))
    await target.prefill(count, PAYLOAD)  # vacuums and analyses the table


async def _fill_neighbour(dsn: str, count: int) -> None:
    """`count` messages in queue A, due from `count` ms ago up to now, in one statement."""
    due = now_ms() - count
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute(
            "INSERT INTO delayed_queue "
            '("pKey", "pKind", payload, "scheduledAt", "scheduledAtInitially", "createdAt") '
            "SELECT 'ready-' || g, %(queue)s, %(payload)s, %(due)s + g, %(due)s + g, %(now)s "
            "FROM generate_series(1, %(count)s) AS g",
            {"queue": NEIGHBOUR, "payload": PAYLOAD, "due": due, "now": now_ms(), "count": count},
        )
        await connection.execute("VACUUM ANALYZE delayed_queue")


@dataclass(frozen=True)
class _Poll:
    finished: float  # perf_counter when its acknowledgement returned
    latency: float  # seconds the poll took
    messages: int


async def held_snapshot(bench: Bench) -> None:
    """A drain with max=100 and 4 workers; once a quarter of it is delivered, another
    connection takes a snapshot (REPEATABLE READ, one read) and holds it for
    plan.snapshot_hold seconds. Throughput and poll latency before, during and after
    the hold, and the table's dead tuples at its start, at its end and after the drain.
    If less than a quarter of the messages is left after the hold, "after" is a second
    drain of a quarter of them, offered once the hold is over."""
    plan = bench.plan
    service = bench.service
    await service.clear()
    await service.prefill(plan.snapshot_messages, PAYLOAD)
    async with await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as connection:
        await connection.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
    workers = [await service.worker() for _ in range(SNAPSHOT_WORKERS)]
    polls: list[_Poll] = []
    delivered = 0
    quarter_delivered = asyncio.Event()

    async def drain(worker) -> None:
        nonlocal delivered
        try:
            while True:
                started = time.perf_counter()
                taken = await worker.take(SNAPSHOT_LIMIT)
                latency = time.perf_counter() - started
                if not taken:
                    return
                await worker.finish(taken)
                delivered += len(taken)
                polls.append(_Poll(time.perf_counter(), latency, len(taken)))
                if delivered >= plan.snapshot_messages * SNAPSHOT_STARTS_AT:
                    quarter_delivered.set()
        finally:
            quarter_delivered.set()  # a drain that ended early must not leave the hold waiting

    dead: dict[str, tuple[int, int]] = {}

    async def hold() -> tuple[float, float]:
        async with (
            await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as sampler,
            await psycopg.AsyncConnection.connect(bench.dsn) as holder,
        ):
            await holder.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            await quarter_delivered.wait()  # connected beforehand: the snapshot comes at once
            await holder.execute("SELECT 1 FROM delayed_queue LIMIT 1")  # the snapshot
            began = time.perf_counter()
            dead["at the hold's start"] = await _dead_tuples(sampler)
            # The hold itself: its length is the point, whatever the sample took.
            await asyncio.sleep(max(0.0, began + plan.snapshot_hold - time.perf_counter()))
            dead["at the hold's end"] = await _dead_tuples(sampler)
            await holder.commit()
            return began, time.perf_counter()

    started = time.perf_counter()
    holding = asyncio.create_task(hold())
    await asyncio.gather(*(drain(worker) for worker in workers))
    drained = time.perf_counter()
    began, ended = await holding
    during = (began, min(ended, drained))
    # A drain that ended inside the hold (or just after it) leaves little or nothing to
    # time after it: a quarter of the messages again, offered into the table as the hold
    # left it (no vacuum), drained the same way, show whether the drain recovers.
    refilled = 0
    after = (ended, drained)
    await asyncio.gather(*(worker.close() for worker in workers))
    quarter = round(plan.snapshot_messages * SNAPSHOT_STARTS_AT)
    if sum(poll.messages for poll in polls if poll.finished >= ended) < quarter:
        refilled = quarter
        await service.prefill(refilled, PAYLOAD, vacuum=False)
        # New connections: the server closes keep-alive ones idle for seconds.
        workers = [await service.worker() for _ in range(SNAPSHOT_WORKERS)]
        after_started = time.perf_counter()
        await asyncio.gather(*(drain(worker) for worker in workers))
        after = (after_started, time.perf_counter())
        await asyncio.gather(*(worker.close() for worker in workers))
    async with await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as sampler:
        dead["after the drain"] = await _dead_tuples(sampler)

    _print_timeline(polls, started, began, ended)
    name = f"held snapshot, {plan.snapshot_hold:g} s in a drain of {plan.snapshot_messages:,}"
    windows = {"before": (started, began), "during": during, "after": after}
    for window, (start, end) in windows.items():
        inside = [poll for poll in polls if start <= poll.finished < end]
        throughput = sum(poll.messages for poll in inside) / (end - start) if inside else None
        bench._add(Row(f"{name}: drain {window}", "msg/s", throughput, None, {}))
    for window, (start, end) in windows.items():
        latencies = [poll.latency for poll in polls if start <= poll.finished < end]
        for fraction in (0.5, 0.99):
            bench._add(
                Row(
                    f"{name}: poll max={SNAPSHOT_LIMIT} p{fraction * 100:g} {window}",
                    "ms",
                    percentile(latencies, fraction) * 1000 if latencies else None,
                    None,
                    {},
                )
            )
    for point, (statistics, counted) in dead.items():
        bench._add(Row(f"{name}: dead tuples {point} (n_dead_tup)", "rows", statistics, None, {}))
        bench._add(Row(f"{name}: dead tuples {point} (pgstattuple)", "rows", counted, None, {}))
    bench._add(Row(f"{name}: drain's length", "s", drained - started, None, {}))
    bench._add(Row(f"{name}: messages offered again after the hold", "msgs", refilled, None, {}))


def _print_timeline(polls: list[_Poll], started: float, began: float, ended: float) -> None:
    """The drain in slices of a tenth of the hold (at least a second), for the eye: not rows."""
    step = max(1.0, (ended - began) / 10)
    print(f"held snapshot timeline (s from the hold's start; it ends at {ended - began:.1f}):")
    last = max((poll.finished for poll in polls), default=started)
    slice_start = started
    while slice_start < last:
        inside = [poll for poll in polls if slice_start <= poll.finished < slice_start + step]
        if inside:
            print(
                f"  {slice_start - began:+7.1f} s: "
                f"{sum(poll.messages for poll in inside) / step:8,.0f} msg/s, poll p50 "
                f"{percentile([poll.latency for poll in inside], 0.5) * 1000:7.1f} ms",
                flush=True,
            )
        slice_start += step


async def _dead_tuples(connection: psycopg.AsyncConnection) -> tuple[int, int]:
    """The table's dead tuples as the statistics views have them (backends report them
    every second or so) and as pgstattuple counts them in the pages."""
    cursor = await connection.execute(
        "SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'delayed_queue'), "
        "dead_tuple_count FROM pgstattuple('delayed_queue')"
    )
    row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1]


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None
