"""The workloads, each run on the service, its raw-SQL ceiling and the peers, round
after round: single and batch offers, drains, delayed delivery, scale and bloat,
and the cost of the delivery history."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import psycopg

from bench.accounting import CpuSplit, percentile, rss_kib
from bench.hourglass import QUEUE, CeilingTarget, ServiceTarget, now_ms
from bench.http_client import Connection
from bench.report import Measurement, Row, format_row
from bench.targets import PAYLOAD, Target


@dataclass(frozen=True)
class Plan:
    """Counts and durations: --quick shrinks them, the full run uses those of record."""

    rounds: int
    offer_clients: tuple[int, ...]
    offer_seconds: float
    batch_clients: int
    batch_messages: int
    drain_messages: int
    drain_workers: tuple[int, ...]
    drain_seconds: float
    delayed_messages: int
    delayed_spread: float
    idle_seconds: float
    scale_future: int
    scale_polls: int
    bloat_messages: int
    neighbour_ready: int  # queue A's ready messages beside queue B (bench/interference.py)
    neighbour_quiet: int  # queue B's ready messages at the start of each round
    neighbour_polls: int  # polls of one (and acks) timed on queue B per round
    snapshot_messages: int  # the drain the snapshot is held during
    snapshot_hold: float  # seconds the snapshot is held


FULL = Plan(
    rounds=3,
    offer_clients=(1, 8, 32),
    offer_seconds=2.5,
    batch_clients=4,
    batch_messages=50_000,
    drain_messages=50_000,
    drain_workers=(1, 4, 16),
    drain_seconds=3.0,
    delayed_messages=10_000,
    delayed_spread=30.0,
    idle_seconds=10.0,
    scale_future=1_000_000,
    scale_polls=2_000,
    bloat_messages=200_000,
    neighbour_ready=1_000_000,
    neighbour_quiet=3_000,
    neighbour_polls=1_000,
    snapshot_messages=200_000,
    snapshot_hold=60.0,
)
QUICK = Plan(
    rounds=1,
    offer_clients=(1, 32),
    offer_seconds=0.4,
    batch_clients=2,
    batch_messages=2_000,
    drain_messages=2_000,
    drain_workers=(4,),
    drain_seconds=0.4,
    delayed_messages=500,
    delayed_spread=1.0,
    idle_seconds=1.0,
    scale_future=20_000,
    scale_polls=100,
    bloat_messages=5_000,
    neighbour_ready=20_000,
    neighbour_quiet=300,
    neighbour_polls=100,
    snapshot_messages=5_000,
    snapshot_hold=1.0,
)


class Bench:
    def __init__(self, plan: Plan, dsn: str, server_pid: int, service: Target, peers: list[Target]):
        self.plan = plan
        self.dsn = dsn
        self.cpu = CpuSplit(server_pid)
        self.service = service
        self.ceiling = CeilingTarget(dsn)
        self.peers = peers
        self.rows: list[Row] = []

    def _cpu_of(self, target: Target) -> CpuSplit:
        """A second server (history off, or --workers N) has its own processes to watch."""
        return CpuSplit(getattr(target, "pid", None) or self.cpu.server_pid)

    @property
    def targets(self) -> list[Target]:
        return [self.service, self.ceiling, *self.peers]

    async def compare(
        self,
        name: str,
        unit: str,
        measure: Callable[[Target], Awaitable[dict[str, Measurement] | None]],
        targets: list[Target] | None = None,
    ) -> list[Row]:
        """Run `measure` on each target, round after round, and keep the medians.

        `measure` may give several figures at once (throughput and latencies); each
        becomes a row named `name` plus its label.
        """
        targets = targets or self.targets
        added: list[Row] = []
        figures: dict[str, dict[str, list[Measurement]]] = {}
        for _ in range(self.plan.rounds):
            for target in targets:  # interleaved, so drift in the machine hits all alike
                result = await measure(target)
                for label, measurement in (result or {}).items():
                    figures.setdefault(label, {}).setdefault(target.name, []).append(measurement)
        for label, by_target in figures.items():
            medians: dict[str, float | None] = {}
            cpu: dict[str, dict[str, float]] = {}
            for target in targets:
                measurements = by_target.get(target.name)
                if not measurements:
                    medians[target.name] = None
                    continue
                ordered = sorted(measurements, key=lambda m: m.value)
                middle = ordered[len(ordered) // 2]
                medians[target.name] = middle.value
                cpu[target.name] = middle.cpu
            row = Row(
                name=f"{name}{label}",
                unit=unit if not label.endswith("ms") else "ms",
                service=medians.pop(self.service.name, None),
                ceiling=medians.pop(self.ceiling.name, None),
                peers=medians,
                cpu=cpu,
                rounds={t: [round(m.value, 2) for m in ms] for t, ms in by_target.items()},
            )
            self._add(row)
            added.append(row)
        return added

    # -- workloads ------------------------------------------------------------------

    async def offers(self, clients: int) -> None:
        async def measure(target: Target) -> dict[str, Measurement]:
            await target.clear()
            workers = [await target.worker() for _ in range(clients)]
            prefix = uuid.uuid4().hex[:8]
            latencies: list[float] = []
            counter = iter(range(10**9))

            async def offer(worker) -> None:
                started = time.perf_counter()
                await worker.offer(f"{prefix}-{next(counter)}", PAYLOAD)
                latencies.append(time.perf_counter() - started)

            await _for(workers, offer, self.plan.offer_seconds / 4)  # warm up
            latencies.clear()
            split = self._cpu_of(target)
            split.start()
            elapsed = await _for(workers, offer, self.plan.offer_seconds)
            cpu = split.stop()
            await _close(workers)
            return {
                "": Measurement(len(latencies) / elapsed, cpu),
                ": p50 ms": Measurement(percentile(latencies, 0.5) * 1000, cpu),
                ": p99 ms": Measurement(percentile(latencies, 0.99) * 1000, cpu),
            }

        await self.compare(f"offer, 1 per request, {clients} clients", "msg/s", measure)

    async def batch_offers(self) -> None:
        clients, batches = self.plan.batch_clients, self.plan.batch_messages // 1000

        async def measure(target: Target) -> dict[str, Measurement]:
            await target.clear()
            workers = [await target.worker() for _ in range(clients)]
            prefix = uuid.uuid4().hex[:8]
            for number, worker in enumerate(workers):  # warm up: one batch each
                await worker.offer_batch([f"w{prefix}-{number}-{i}" for i in range(1000)], PAYLOAD)
            pending = iter(range(batches))

            async def offer(worker) -> None:
                for batch in pending:
                    await worker.offer_batch(
                        [f"{prefix}-{batch}-{i}" for i in range(1000)], PAYLOAD
                    )

            split = self._cpu_of(target)
            split.start()
            started = time.perf_counter()
            await asyncio.gather(*(offer(worker) for worker in workers))
            elapsed = time.perf_counter() - started
            cpu = split.stop()
            await _close(workers)
            return {"": Measurement(batches * 1000 / elapsed, cpu)}

        await self.compare(f"batch offer, 1000 per request, {clients} clients", "msg/s", measure)

    async def _drain(
        self, target: Target, limit: int, workers_count: int, ack_on_poll: bool = False
    ) -> dict[str, Measurement] | None:
        """Messages a second that `workers_count` workers poll (`limit` at a time) and ack
        (each lock on the next poll, where Hourglass's `ack_on_poll`)."""
        if limit > target.max_take:
            return None
        await target.clear()
        await target.prefill(self.plan.drain_messages, PAYLOAD)
        workers = [await _drain_worker(target, limit, ack_on_poll) for _ in range(workers_count)]
        delivered = 0
        deadline = time.perf_counter() + self.plan.drain_seconds

        async def work(worker) -> None:
            nonlocal delivered
            while time.perf_counter() < deadline:
                taken = await worker.take(limit)
                if not taken:
                    return
                await worker.finish(taken)
                delivered += len(taken)

        cpu = self._cpu_of(target)
        cpu.start()
        started = time.perf_counter()
        await asyncio.gather(*(work(worker) for worker in workers))
        elapsed = time.perf_counter() - started
        used = cpu.stop()
        await _close(workers)
        return {"": Measurement(delivered / elapsed, used)}

    async def drain(self, limit: int, workers_count: int, ack_on_poll: bool = False) -> None:
        how = "ack on the next poll" if ack_on_poll else "ack"
        await self.compare(
            f"drain, poll max={limit} + {how}, {workers_count} workers",
            "msg/s",
            lambda target: self._drain(target, limit, workers_count, ack_on_poll),
        )

    async def history(self, without: Target, workers_count: int) -> None:
        """What recording the delivery history costs a drain: the same drain through a
        second server with HOURGLASS_HISTORY off, and the ceiling with and without it."""
        ceiling_without = CeilingTarget(self.dsn, history=False, name="ceiling, history off")
        for limit in (1, 100):
            name = f"drain, poll max={limit} + ack, {workers_count} workers, history "
            (row,) = await self.compare(
                name + "on",
                "msg/s",
                lambda target, limit=limit: self._drain(target, limit, workers_count),
                targets=[self.service, self.ceiling, without, ceiling_without],
            )
            self.rows.remove(row)
            self._add(dataclasses.replace(row, peers={}))
            self._add(
                Row(
                    name=name + "off",
                    unit=row.unit,
                    service=row.peers[without.name],
                    ceiling=row.peers[ceiling_without.name],
                    peers={},
                    cpu={self.service.name: row.cpu.get(without.name, {})},
                    rounds={
                        self.service.name: row.rounds.get(without.name, []),
                        self.ceiling.name: row.rounds.get(ceiling_without.name, []),
                    },
                )
            )

    async def delayed(self) -> None:
        """Lateness of long-polling workers, then what they cost the database while idle."""
        plan = self.plan
        service = self.service
        assert isinstance(service, ServiceTarget)
        await service.clear()
        # The workers wait first, so producing cannot eat into the first due times.
        lateness: list[float] = []
        done = asyncio.Event()

        async def work() -> None:
            worker = await service.worker()
            try:
                while not done.is_set():
                    taken = await worker.take(100, wait=20)
                    received = now_ms()
                    for message in taken:
                        due = _parse_rfc3339(message["scheduled_at_initially"])
                        lateness.append(received - due)
                    if taken:
                        await worker.finish(taken)
                    if len(lateness) >= plan.delayed_messages:
                        done.set()
            finally:
                await worker.close()

        self.cpu.start()
        tasks = [asyncio.create_task(work()) for _ in range(4)]
        payload = json.loads(PAYLOAD)
        producer = Connection(service.host, service.port)
        first_due = now_ms() + 2000
        step = plan.delayed_spread * 1000 / plan.delayed_messages
        for start in range(0, plan.delayed_messages, 1000):
            items = [
                {
                    "key": f"due-{n}",
                    "payload": payload,
                    "scheduled_at": _rfc3339(first_due + round(n * step)),
                }
                for n in range(start, min(start + 1000, plan.delayed_messages))
            ]
            await producer.json("POST", f"/v1/queues/{QUEUE}/batch", {"messages": items})
        await producer.close()
        if now_ms() > first_due:
            raise RuntimeError("offering took longer than the 2 s lead: lateness would be wrong")

        await asyncio.wait_for(done.wait(), plan.delayed_spread + 60)
        cpu = self.cpu.stop()
        # The same four workers, long-polling an empty queue: count what reaches the database.
        await asyncio.sleep(1)
        statements_before = await self._statements()
        idle_started = time.perf_counter()
        await asyncio.sleep(plan.idle_seconds)
        statements = (await self._statements() - statements_before) / (
            time.perf_counter() - idle_started
        )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

        rows = [
            ("delayed delivery, 4 long-polling workers: lateness p50", percentile(lateness, 0.5)),
            ("delayed delivery, 4 long-polling workers: lateness p95", percentile(lateness, 0.95)),
            ("delayed delivery, 4 long-polling workers: lateness p99", percentile(lateness, 0.99)),
        ]
        for name, value in rows:
            self._add(Row(name, "ms", value, None, {}, {"hourglass": cpu}))
        self._add(
            Row(
                "idle, 4 workers long-polling an empty queue: database statements",
                "per s",
                statements,
                None,
                {},
            )
        )

    async def scale(self) -> None:
        """Poll+ack latency with no and with many future messages; bloat after a long drain."""
        plan = self.plan
        targets: list[Target] = [self.service, self.ceiling]

        async def latency(target: Target, vacuum: bool = True) -> dict[str, Measurement]:
            await target.prefill(plan.scale_polls, PAYLOAD, vacuum=vacuum)
            worker = await target.worker()
            timings = []
            for _ in range(plan.scale_polls):
                started = time.perf_counter()
                taken = await worker.take(1)
                await worker.finish(taken)
                timings.append(time.perf_counter() - started)
            await worker.close()
            return {"": Measurement(statistics.median(timings) * 1000)}

        async def empty(target: Target) -> dict[str, Measurement]:
            await target.clear()
            return await latency(target)

        [without] = await self.compare(
            "poll max=1 + ack latency, no future messages", "ms", empty, targets
        )
        await self.service.clear()
        rss_before = rss_kib(self.cpu.server_pid)
        future = f"{plan.scale_future:,} future messages"
        await self._future_messages(plan.scale_future)
        [with_future] = await self.compare(
            f"poll max=1 + ack latency, {future}", "ms", latency, targets
        )
        self._add(
            Row(
                f"poll max=1 + ack latency with {future} / without",
                "x",
                _ratio(with_future.service, without.service),
                _ratio(with_future.ceiling, without.ceiling),
                {},
            )
        )
        rss_after = rss_kib(self.cpu.server_pid)
        self._add(Row(f"server memory (RSS) with {future}", "MiB", rss_after / 1024, None, {}))
        self._add(Row(f"server memory growth with {future}", "x", rss_after / rss_before, None, {}))

        await self.service.clear()
        autovacuums_before = await self._autovacuum_count()
        await self.service.prefill(plan.bloat_messages, PAYLOAD)
        workers = [await self.service.worker() for _ in range(4)]

        async def drain(worker) -> None:
            while taken := await worker.take(100):
                await worker.finish(taken)

        await asyncio.gather(*(drain(worker) for worker in workers))
        await _close(workers)
        # Read the table as the drain left it, before anything else touches it. The
        # statistics views lag (backends report every second or so): pgstattuple
        # counts the dead tuples in the pages themselves.
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as connection:
            await connection.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            row = await (
                await connection.execute(
                    "SELECT dead_tuple_count, pg_total_relation_size('delayed_queue'), "
                    "(SELECT autovacuum_count FROM pg_stat_user_tables "
                    "WHERE relname = 'delayed_queue') FROM pgstattuple('delayed_queue')"
                )
            ).fetchone()
        after_drain = await latency(self.service, vacuum=False)
        dead, size, autovacuums_after = row
        label = f"after draining {plan.bloat_messages:,} messages with max=100"
        self._add(Row(f"{label}: poll max=1 + ack latency", "ms", after_drain[""].value, None, {}))
        self._add(Row(f"{label}: dead tuples", "rows", dead, None, {}))
        self._add(Row(f"{label}: table + index size", "MiB", size / 2**20, None, {}))
        self._add(
            Row(
                f"{label}: autovacuum runs meanwhile",
                "runs",
                autovacuums_after - autovacuums_before,
                None,
                {},
            )
        )

    async def _autovacuum_count(self) -> int:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as connection:
            cursor = await connection.execute(
                "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'delayed_queue'"
            )
            return (await cursor.fetchone())[0]

    # -- helpers ----------------------------------------------------------------------

    def _add(self, row: Row) -> None:
        self.rows.append(row)
        print(format_row(row), flush=True)

    async def _statements(self) -> float:
        connection = Connection(self.service.host, self.service.port)
        _, body = await connection.request("GET", "/metrics")
        await connection.close()
        for line in body.decode().splitlines():
            if line.startswith("hourglass_database_statements_total "):
                return float(line.split()[1])
        raise RuntimeError("the service exposes no hourglass_database_statements_total")

    async def _future_messages(self, count: int) -> None:
        """`count` messages due in a day, in the queue the latency is measured on."""
        due = now_ms() + 86_400_000
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as connection:
            await connection.execute(
                "INSERT INTO delayed_queue "
                '("pKey", "pKind", payload, "scheduledAt", "scheduledAtInitially", "createdAt") '
                "SELECT 'future-' || g, %(queue)s, %(payload)s, %(due)s + g, %(due)s + g, %(now)s "
                "FROM generate_series(1, %(count)s) AS g",
                {"queue": QUEUE, "payload": PAYLOAD, "due": due, "now": now_ms(), "count": count},
            )
            await connection.execute("VACUUM ANALYZE delayed_queue")


async def _drain_worker(target: Target, limit: int, ack_on_poll: bool = False) -> Any:
    """A worker for a drain of `limit` at a time: Hourglass's (the service and its ceiling)
    acknowledges each message of a drain of one on its next poll (decision 21), as its
    workers do; a drain of 100 acknowledges each poll by itself, unless `ack_on_poll`."""
    if (limit == 1 or ack_on_poll) and isinstance(target, ServiceTarget | CeilingTarget):
        return await target.worker(ack_on_poll=True)
    return await target.worker()


async def _for(workers: list, operation: Callable[[Any], Awaitable[None]], seconds: float) -> float:
    """Run `operation` on every worker in a loop for `seconds`; the time it really took."""
    deadline = time.perf_counter() + seconds

    async def loop(worker) -> None:
        while time.perf_counter() < deadline:
            await operation(worker)

    started = time.perf_counter()
    await asyncio.gather(*(loop(worker) for worker in workers))
    return time.perf_counter() - started


async def _close(workers: list) -> None:
    await asyncio.gather(*(worker.close() for worker in workers))


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None


def _rfc3339(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _parse_rfc3339(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)
