"""Hourglass's benchmarks: every workload against the service over HTTP, its raw-SQL
ceiling (the same statements through psycopg in this process) and the peers
pgmq, pgqueuer and procrastinate, all in one run on one PostgreSQL database.

    pip install -e '.[bench]'
    python bench/run.py                          # full run, ~10 min: rewrites bench/RESULTS.md
    python bench/run.py --quick --json /tmp/b.json   # under a minute, smaller counts

The database named by --database-url is dropped and created afresh. The service
runs as `hourglass serve` in its own process; the load comes from this process
through a minimal keep-alive HTTP client, and every figure comes with the CPU
split between the server, this process and PostgreSQL. The `history` workload
starts a second server with HOURGLASS_HISTORY off, to show what recording the
delivery history costs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH.parent))  # for tests.server, which starts the service

from hourglass import QUEUE, CeilingTarget, ServiceTarget, fresh_database, now_ms
from http_client import Connection
from targets import Target

from tests.server import Server, running_server

# About 100 bytes of JSON, the same for every system.
PAYLOAD = b'{"user":123456,"text":"' + b"x" * 70 + b'"}'
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
RESULTS_BEGIN = "<!-- bench/run.py writes from here -->"
RESULTS_END = "<!-- bench/run.py writes up to here -->"


@dataclass(frozen=True)
class Plan:
    """Counts and durations: --quick shrinks them, the full run uses the issue's."""

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
)
QUICK = Plan(
    rounds=1,
    offer_clients=(1, 32),
    offer_seconds=0.7,
    batch_clients=2,
    batch_messages=5_000,
    drain_messages=5_000,
    drain_workers=(4,),
    drain_seconds=0.8,
    delayed_messages=1_000,
    delayed_spread=3.0,
    idle_seconds=2.0,
    scale_future=100_000,
    scale_polls=300,
    bloat_messages=10_000,
)


# -- measuring --------------------------------------------------------------------


def _process_cpu(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime


def _postgres_cpu() -> dict[int, float]:
    """CPU seconds of every PostgreSQL process now, by pid."""
    used: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == "postgres":
                    used[int(entry.name)] = _process_cpu(int(entry.name))
            except (FileNotFoundError, ProcessLookupError):
                continue
    return used


class CpuSplit:
    """CPU time of the server, this process and PostgreSQL between start() and stop()."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid

    def _sample(self) -> tuple[float, float, float, dict[int, float]]:
        times = os.times()
        return (
            time.perf_counter(),
            _process_cpu(self.server_pid),
            times.user + times.system,
            _postgres_cpu(),
        )

    def start(self) -> None:
        self._before = self._sample()

    def stop(self) -> dict[str, float]:
        after = self._sample()
        wall = after[0] - self._before[0]
        # PostgreSQL: what each backend alive at the end used since the start (a
        # backend started meanwhile, from zero); one that ended meanwhile is lost.
        postgres = sum(cpu - self._before[3].get(pid, 0.0) for pid, cpu in after[3].items())
        return {
            "server_pct": round(100 * (after[1] - self._before[1]) / wall),
            "bench_pct": round(100 * (after[2] - self._before[2]) / wall),
            "postgres_pct": round(100 * postgres / wall),
        }


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


@dataclass
class Measurement:
    value: float
    cpu: dict[str, float] = field(default_factory=dict)


@dataclass
class Row:
    """One line of the results: a workload's figure for each system."""

    name: str
    unit: str
    service: float | None
    ceiling: float | None
    peers: dict[str, float | None]
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    rounds: dict[str, list[float]] = field(default_factory=dict)

    @property
    def ratio(self) -> float | None:
        if self.service is None or not self.ceiling or self.unit == "x":
            return None  # a growth factor's "ceiling" column is the ceiling's own growth
        return self.service / self.ceiling

    def as_json(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio}


class Bench:
    def __init__(self, plan: Plan, dsn: str, server_pid: int, service: Target, peers: list[Target]):
        self.plan = plan
        self.dsn = dsn
        self.cpu = CpuSplit(server_pid)
        self.service = service
        self.ceiling = CeilingTarget(dsn)
        self.peers = peers
        self.rows: list[Row] = []

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
            self.cpu.start()
            elapsed = await _for(workers, offer, self.plan.offer_seconds)
            cpu = self.cpu.stop()
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

            self.cpu.start()
            started = time.perf_counter()
            await asyncio.gather(*(offer(worker) for worker in workers))
            elapsed = time.perf_counter() - started
            cpu = self.cpu.stop()
            await _close(workers)
            return {"": Measurement(batches * 1000 / elapsed, cpu)}

        await self.compare(f"batch offer, 1000 per request, {clients} clients", "msg/s", measure)

    async def _drain(
        self, target: Target, limit: int, workers_count: int
    ) -> dict[str, Measurement] | None:
        """Messages a second that `workers_count` workers poll (`limit` at a time) and ack."""
        if limit > target.max_take:
            return None
        await target.clear()
        await target.prefill(self.plan.drain_messages, PAYLOAD)
        workers = [await target.worker() for _ in range(workers_count)]
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

        # A second server (history off) has its own process to watch.
        cpu = CpuSplit(getattr(target, "pid", None) or self.cpu.server_pid)
        cpu.start()
        started = time.perf_counter()
        await asyncio.gather(*(work(worker) for worker in workers))
        elapsed = time.perf_counter() - started
        used = cpu.stop()
        await _close(workers)
        return {"": Measurement(delivered / elapsed, used)}

    async def drain(self, limit: int, workers_count: int) -> None:
        await self.compare(
            f"drain, poll max={limit} + ack, {workers_count} workers",
            "msg/s",
            lambda target: self._drain(target, limit, workers_count),
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
        rss_before = _rss_kib(self.cpu.server_pid)
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
        rss_after = _rss_kib(self.cpu.server_pid)
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
        print(_format_row(row), flush=True)

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


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _rfc3339(epoch_ms: int) -> str:
    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _parse_rfc3339(text: str) -> int:
    return round(datetime.fromisoformat(text).timestamp() * 1000)


# -- reporting ----------------------------------------------------------------------


def _number(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    return f"{value:.2f}"


def _format_row(row: Row) -> str:
    peers = ", ".join(f"{name} {_number(value)}" for name, value in row.peers.items())
    ratio = f" (x{row.ratio:.2f})" if row.ratio is not None else ""
    return (
        f"{row.name}: {_number(row.service)} {row.unit}{ratio}"
        + (f"; ceiling {_number(row.ceiling)}" if row.ceiling is not None else "")
        + (f"; {peers}" if peers else "")
    )


def _machine(dsn: str) -> str:
    with psycopg.connect(dsn) as connection:
        version = connection.execute("SHOW server_version").fetchone()[0]
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        platform.machine(),
    )
    return (
        f"{os.cpu_count()} cores ({cpu}), Python {platform.python_version()}, "
        f"PostgreSQL {version}, {platform.system()} {platform.release()}"
    )


def markdown(rows: list[Row], peer_names: list[str], machine: str, command: str) -> str:
    header = [
        "workload",
        "unit",
        "hourglass",
        "ceiling",
        "ratio",
        *peer_names,
        "CPU % server / bench / postgres",
    ]
    lines = [
        RESULTS_BEGIN,
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC on {machine}.",
        "",
        "```sh",
        command,
        "```",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cpu = row.cpu.get("hourglass")
        split = f"{cpu['server_pct']} / {cpu['bench_pct']} / {cpu['postgres_pct']}" if cpu else ""
        ratio = f"{row.ratio:.2f}" if row.ratio is not None else ""
        cells = [
            row.name,
            row.unit,
            _number(row.service),
            _number(row.ceiling),
            ratio,
            *(_number(row.peers.get(name)) for name in peer_names),
            split,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", RESULTS_END]
    return "\n".join(lines)


def write_results(path: Path, block: str) -> None:
    """Replace the generated block of `path`, keeping the prose around it."""
    text = (
        path.read_text()
        if path.exists()
        else f"# Benchmark results\n\n{RESULTS_BEGIN}\n{RESULTS_END}\n"
    )
    if RESULTS_BEGIN in text and RESULTS_END in text:
        before, rest = text.split(RESULTS_BEGIN, 1)
        after = rest.split(RESULTS_END, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


# -- the run ------------------------------------------------------------------------


async def run(
    plan: Plan,
    dsn: str,
    server: Server,
    peer_names: list[str],
    workloads: set[str],
    without_history: Server | None = None,
) -> list[Row]:
    if peer_names:
        from peers import PEERS  # the [bench] extra: only needed when peers are measured

        peers = [PEERS[name](dsn) for name in peer_names]
    else:
        peers = []
    for peer in peers:
        await peer.setup()
    service = ServiceTarget(dsn, "127.0.0.1", server.port, server.pid)
    bench = Bench(plan, dsn, server.pid, service, peers)
    try:
        if "offer" in workloads:
            for clients in plan.offer_clients:
                await bench.offers(clients)
        if "batch" in workloads:
            await bench.batch_offers()
        if "drain" in workloads:
            for limit in (1, 100):
                for workers in plan.drain_workers:
                    await bench.drain(limit, workers)
        if "delayed" in workloads:
            await bench.delayed()
        if "scale" in workloads:
            await bench.scale()
        if "history" in workloads:
            assert without_history is not None
            off = ServiceTarget(
                dsn,
                "127.0.0.1",
                without_history.port,
                without_history.pid,
                "hourglass, history off",
            )
            await bench.history(off, plan.drain_workers[len(plan.drain_workers) // 2])
    finally:
        for peer in peers:
            await peer.close()
    return bench.rows


def _event_loop_factory():
    """uvloop when installed (uvicorn[standard] brings it): less client CPU per request."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


PEER_NAMES = ("pgmq", "pgqueuer", "procrastinate")  # bench/peers.py's PEERS
WORKLOADS = ("offer", "batch", "drain", "delayed", "scale", "history")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller counts, under a minute")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument(
        "--results",
        type=Path,
        help="Markdown file whose generated block to rewrite "
        "(default: bench/RESULTS.md for a full run, none for --quick)",
    )
    parser.add_argument(
        "--database-url",
        default="postgresql://root@127.0.0.1:5432/hourglass_bench",
        help="PostgreSQL database to drop, create and use (default: %(default)s)",
    )
    parser.add_argument(
        "--peers", default=",".join(PEER_NAMES), help="comma-separated, or '' for none"
    )
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated subset")
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    peer_names = [name for name in args.peers.split(",") if name]
    workloads = {name for name in args.workloads.split(",") if name}
    if unknown := (set(peer_names) - set(PEER_NAMES)) | (workloads - set(WORKLOADS)):
        parser.error(f"unknown peers or workloads: {sorted(unknown)}")
    command = "python bench/run.py " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.perf_counter()
    fresh_database(args.database_url)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(running_server(args.database_url))
        without_history = None
        if "history" in workloads:
            without_history = stack.enter_context(
                running_server(args.database_url, HOURGLASS_HISTORY="false")
            )
        runner = stack.enter_context(asyncio.Runner(loop_factory=_event_loop_factory()))
        rows = runner.run(
            run(plan, args.database_url, server, peer_names, workloads, without_history)
        )
    machine = _machine(args.database_url)
    print(f"finished in {time.perf_counter() - started:.0f} s")

    results = args.results or (None if args.quick else BENCH / "RESULTS.md")
    if results is not None:
        write_results(results, markdown(rows, peer_names, machine, command.strip()))
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "machine": machine,
                    "command": command.strip(),
                    "workloads": [row.as_json() for row in rows],
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
