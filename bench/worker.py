"""The client library's workers draining a queue with a no-op handler, against
bench's raw drain through HTTP at the same concurrency.

    python -m bench.worker                  # 50,000 messages, 5 rounds, 2-3 minutes
    python -m bench.worker --quick          # 2,000 messages, 1 round, no warm-up
    python -m bench.worker --tracing        # each worker with its tracing off and on

One `hourglass serve` (default settings) on a PostgreSQL database that the run drops
and creates. Each measurement starts from the queue emptied and vacuumed, fills it
with `--messages` ready messages through batch offers (1000 a request, over HTTP),
runs VACUUM ANALYZE, then drains it in a client process of its own
(`bench/worker_drain.py`: it imports the client, never the server):

- raw: bench's drain (`bench/hourglass.py`), P pollers each polling `max`=M and
  acknowledging the whole lock, on bench's minimal HTTP client;
- raw, per-key acks: the same, acknowledging each poll by its keys (what the library
  sends), to tell the server's share of the gap from the library's;
- `AsyncWorker` with `concurrency` P×M, a no-op coroutine handler;
- `Worker` (threads), `concurrency` P×M, a no-op function;
- the TypeScript client's `Worker` (clients/typescript, built by `npm ci` there), in a
  Node process (`bench/worker_drain.mjs`), `concurrency` P×M, a no-op function.

The workers trace (a consumer span per handler) whenever opentelemetry-api is
importable, which the header line says; no SDK is configured, so the spans are the
API's no-op ones. `--tracing` runs each worker twice a round, with `tracing=False` and
with tracing, to read what the spans cost (docs/guide/workers.md, "Tracing"); its
batch offers then each send a `traceparent` of their own, so every message of every
drain (raw ones too) carries a trace, which each handler's span reads for its parent,
as the header line says. Without `--tracing` the messages carry none.

Equal concurrency: on both sides at most P×M messages are asked for or being
handled at once. The raw pollers ask for M each and hold them until their
acknowledgement answers; a worker's polls ask only for its free slots (P×M less the
handlers running and what polls already out asked for), and a slot is free again
when its handler returns, so messages whose acknowledgement is on its way are not
counted (as a real worker does). Every variant and the raw drain run on the stock
asyncio event loop (the TypeScript worker on Node's), in a client process of their own
(its CPU: `os.times`, or Node's `process.cpuUsage`). The variants alternate in
that order round after round (with `--tracing`, every other round runs each worker
traced first), so drift in the shared machine hits all alike; the
figures are medians over rounds, and each ratio is to the raw drain. CPU per
message: the client process (its own count), the server process and every
PostgreSQL process (from /proc) over the drain; requests per 1,000 messages come
from the server's Prometheus counters.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import psycopg

from bench.accounting import postgres_cpu, process_cpu
from bench.hourglass import QUEUE, ServiceWorker, _HourglassTable, fresh_database
from bench.http_client import Connection
from bench.targets import PAYLOAD
from tests.support.server import Server, running_server

ROOT = Path(__file__).resolve().parents[1]
CLIENT_PATH = ROOT / "clients" / "python"
BATCH = 1000
FILL_CONNECTIONS = 2
CHILD_TIMEOUT = 600  # seconds a drain may take before the run fails
# The TypeScript worker's row needs Node and the client built (`npm ci` in
# clients/typescript, as .ci/run does); without them the row is left out, and said so.
TYPESCRIPT_BUILT = (
    shutil.which("node") is not None
    and (ROOT / "clients" / "typescript" / "dist" / "index.js").exists()
)

# The variants in the order each round runs them: bench/worker_drain.py's name, the row's.
VARIANTS = {
    "raw": "raw drain, whole-lock acks",
    "raw-keys": "raw drain, per-key acks",
    "async": "AsyncWorker, per-key acks",
    "threads": "Worker (threads), per-key acks",
    "typescript": "TypeScript Worker (Node), per-key acks",
}
# How the server's routes are shown in the requests column.
ROUTES = {
    ("POST", "/v1/queues/{queue}/poll"): "poll",
    ("DELETE", "/v1/queues/{queue}/locks/{lock_id}"): "ack lock",
    ("POST", "/v1/queues/{queue}/locks/{lock_id}/ack"): "ack keys",
    ("PATCH", "/v1/queues/{queue}/locks/{lock_id}"): "extend",
    ("POST", "/v1/queues/{queue}/locks/{lock_id}/release"): "release",
}


@dataclass(frozen=True)
class Plan:
    messages: int
    rounds: int
    pollers: int
    max: int
    warm_up: int  # messages each variant drains once before the rounds (0: none)
    client: Path  # the folder the client processes import hourglass_client from
    batches: tuple[int, ...] = ()  # the workers' batch sizes to run (none: their default)
    tracing: bool = False  # each worker with tracing off and on

    @property
    def concurrency(self) -> int:
        return self.pollers * self.max

    @property
    def variants(self) -> dict[str, str]:
        """The drains each round runs, in order: worker_drain's variant with the workers'
        batch and tracing (`async:100` for a batch of 100, `async::off` for the default
        batch untraced), the row's name."""
        variants = {"raw": VARIANTS["raw"], "raw-keys": VARIANTS["raw-keys"]}
        tracings = {"off": ", tracing off", "on": ", tracing on"} if self.tracing else {"": ""}
        for batch in self.batches or (None,):
            for library in ("async", "threads", "typescript")[: 3 if TYPESCRIPT_BUILT else 2]:
                # The TypeScript worker has no OpenTelemetry of its own: one row, untraced.
                for tracing, said in (
                    tracings.items() if library != "typescript" else {"": ""}.items()
                ):
                    key = ":".join((library, str(batch or ""), tracing)).rstrip(":")
                    name = VARIANTS[library] + (f", batch {batch}" if batch else "") + said
                    variants[key] = name
        return variants


@dataclass(frozen=True)
class Drain:
    """One drain: how long it took and what it cost."""

    variant: str
    messages: int
    seconds: float
    client_cpu: float
    server_cpu: float
    postgres_cpu: float
    requests: Counter[str]

    @property
    def rate(self) -> float:
        return self.messages / self.seconds

    def per_message_us(self, cpu: float) -> float:
        return 1e6 * cpu / self.messages


# -- one measurement ---------------------------------------------------------------------


async def refill(dsn: str, server: Server, messages: int, tag: str, traced: bool) -> None:
    """Empty and vacuum the queue, then offer `messages` ready ones in batches over HTTP,
    each batch with a `traceparent` of its own if `traced` (the service stores it with
    each of the batch's messages)."""
    table = _HourglassTable(dsn)
    await table.clear()
    connections = [ServiceWorker(Connection("127.0.0.1", server.port)) for _ in range(2)]
    batches = iter(range(0, messages, BATCH))

    async def offer(worker: ServiceWorker) -> None:
        for start in batches:
            keys = [f"{tag}-{n}" for n in range(start, min(start + BATCH, messages))]
            await worker.offer_batch(keys, PAYLOAD, traceparent() if traced else None)

    await asyncio.gather(*(offer(worker) for worker in connections))
    await asyncio.gather(*(worker.close() for worker in connections))
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        if traced:  # the service kept each batch's trace with every message
            cursor = await connection.execute(
                'SELECT count(*) FROM delayed_queue WHERE "pKind" = %s AND trace IS NOT NULL',
                (QUEUE,),
            )
            kept = await cursor.fetchone()
            if kept is None or kept[0] != messages:
                raise RuntimeError(f"{kept} of {messages} messages stored with a trace")
        await connection.execute("VACUUM ANALYZE delayed_queue")


def traceparent() -> str:
    """A sampled producer span's W3C traceparent, its ids random."""
    return f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"


def drain_in_child(variant: str, server: Server, plan: Plan, messages: int) -> Drain:
    """Run one drain in a client process; its figures, once every message is acknowledged."""
    path = [str(plan.client), str(ROOT), os.environ.get("PYTHONPATH", "")]
    library, batch, tracing = (variant.split(":") + ["", ""])[:3]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    if library == "typescript":
        command = [
            "node",
            str(ROOT / "bench" / "worker_drain.mjs"),
            *("--url", server.url, "--messages", str(messages)),
            *("--concurrency", str(plan.concurrency)),
            *(("--batch", batch) if batch else ()),
        ]
    else:
        command = [
            sys.executable,
            "-m",
            "bench.worker_drain",
            library,
            *("--url", server.url, "--messages", str(messages)),
            *("--pollers", str(plan.pollers), "--max", str(plan.max)),
            *(("--batch", batch) if batch else ()),
            *(("--no-tracing",) if tracing == "off" else ()),
        ]
    child = subprocess.Popen(
        command, cwd=ROOT, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        if child.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{variant}: the client process did not start")
        requests_before = requests_by_route(server.url)
        server_before, postgres_before = process_cpu(server.pid), postgres_cpu()
        printed, _ = child.communicate("go\n", timeout=CHILD_TIMEOUT)
        server_used = process_cpu(server.pid) - server_before
        postgres_after = postgres_cpu()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"{variant}: the client process exited {child.returncode}")
    postgres_used = sum(cpu - postgres_before.get(pid, 0.0) for pid, cpu in postgres_after.items())
    requests = requests_by_route(server.url)
    requests.subtract(requests_before)
    result = json.loads(printed.strip().splitlines()[-1])
    return Drain(
        variant,
        result["messages"],
        result["seconds"],
        result["cpu_seconds"],
        server_used,
        postgres_used,
        +requests,
    )


def requests_by_route(url: str) -> Counter[str]:
    """The server's request count so far by route (the `/metrics` scrapes left out)."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        if not line.startswith("hourglass_http_request_duration_seconds_count{"):
            continue
        labels, value = line.rsplit(" ", 1)
        fields = dict(part.split("=", 1) for part in labels[labels.index("{") + 1 : -1].split('",'))
        method, route = fields["method"].strip('"'), fields["route"].strip('"')
        if route == "/metrics":
            continue
        counts[ROUTES.get((method, route), f"{method} {route}")] += int(float(value))
    return counts


def check_drained(dsn: str, messages: int) -> None:
    """Every message acknowledged once: the queue empty, a history row each."""
    with psycopg.connect(dsn) as connection:
        left = connection.execute(
            'SELECT count(*) FROM delayed_queue WHERE "pKind" = %s', (QUEUE,)
        ).fetchone()
        acknowledged = connection.execute(
            "SELECT count(*), max(deliveries) FROM delivery_history "
            "WHERE queue = %s AND outcome = 'acknowledged'",
            (QUEUE,),
        ).fetchone()
    assert left is not None and acknowledged is not None
    if left[0] or acknowledged[0] != messages or acknowledged[1] != 1:
        raise RuntimeError(
            f"not drained once each: {left[0]} left, {acknowledged[0]} acknowledged of "
            f"{messages}, at most {acknowledged[1]} deliveries"
        )


# -- the run -----------------------------------------------------------------------------


def measure(dsn: str, server: Server, plan: Plan) -> list[list[Drain]]:
    """Every variant, round after round (after a warm-up of each); the drains by round."""
    rounds: list[list[Drain]] = []
    with asyncio.Runner() as runner:
        if plan.warm_up:
            for variant in plan.variants:
                runner.run(refill(dsn, server, plan.warm_up, f"warm-{variant}", plan.tracing))
                drain_in_child(variant, server, plan, plan.warm_up)
        for number in range(plan.rounds):
            by_variant = {}
            for variant in _round_order(list(plan.variants), number):
                runner.run(refill(dsn, server, plan.messages, f"r{number}-{variant}", plan.tracing))
                drain = drain_in_child(variant, server, plan, plan.messages)
                check_drained(dsn, plan.messages)
                print(
                    f"round {number + 1}, {plan.variants[variant]}: {drain.rate:,.0f} msg/s",
                    file=sys.stderr,
                    flush=True,
                )
                by_variant[variant] = drain
            rounds.append([by_variant[variant] for variant in plan.variants])
    return rounds


def _round_order(variants: list[str], number: int) -> list[str]:
    """The order round `number` runs the variants in: every other round runs each worker
    traced before untraced, so neither gains from its place in the round."""
    if number % 2 == 0:
        return variants
    order = variants.copy()
    for index, variant in enumerate(order[:-1]):
        if variant.endswith(":off") and order[index + 1].endswith(":on"):
            order[index], order[index + 1] = order[index + 1], variant
    return order


def report(rounds: list[list[Drain]], plan: Plan) -> str:
    """The table: a row per variant with its median, its rounds and its ratio to raw."""
    by_variant = {variant: [r[i] for r in rounds] for i, variant in enumerate(plan.variants)}
    raw_rates = [drain.rate for drain in by_variant["raw"]]
    raw_median = statistics.median(raw_rates)
    header = (
        "| drain | msg/s, median | rounds | ratio to raw | ratio per round (median) "
        "| CPU µs/msg: client / server / PostgreSQL | requests per 1,000 msg |"
    )
    lines = [header, "|---|---|---|---|---|---|---|"]
    for variant, drains in by_variant.items():
        rates = [drain.rate for drain in drains]
        median = statistics.median(rates)
        middle = sorted(drains, key=lambda d: d.rate)[len(drains) // 2]
        ratios = [drain.rate / raw for drain, raw in zip(drains, raw_rates, strict=True)]
        per_round = " / ".join(f"{ratio:.2f}" for ratio in ratios)
        per_round += f" ({statistics.median(ratios):.2f})"
        cpu = " / ".join(
            f"{middle.per_message_us(used):.0f}"
            for used in (middle.client_cpu, middle.server_cpu, middle.postgres_cpu)
        )
        requests = ", ".join(
            f"{name} {1000 * count / middle.messages:.1f}"
            for name, count in sorted(middle.requests.items())
        )
        cells = [
            plan.variants[variant],
            f"{median:,.0f}",
            " / ".join(f"{rate:,.0f}" for rate in rates),
            f"{median / raw_median:.2f}",
            per_round,
            cpu,
            requests,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if plan.tracing:
        lines += ["", *_tracing_cost(by_variant, plan)]
    return "\n".join(lines)


def _tracing_cost(by_variant: dict[str, list[Drain]], plan: Plan) -> list[str]:
    """Each worker's rate with tracing on over its rate with tracing off, round by round."""
    lines = []
    for variant in plan.variants:
        if not variant.endswith(":off"):
            continue
        off, on = by_variant[variant], by_variant[variant.removesuffix("off") + "on"]
        ratios = [traced.rate / bare.rate for traced, bare in zip(on, off, strict=True)]
        name = plan.variants[variant].removesuffix(", tracing off")
        lines.append(
            f"- {name}: tracing on / off "
            + " / ".join(f"{ratio:.3f}" for ratio in ratios)
            + f" (median {statistics.median(ratios):.3f})"
        )
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="2,000 messages, one round")
    parser.add_argument(
        "--database-url",
        default="postgresql://root@127.0.0.1:5432/hourglass_bench_worker",
        help="PostgreSQL database to drop, create and use (default: %(default)s)",
    )
    parser.add_argument("--messages", type=int, help="per drain (default 50,000; --quick 2,000)")
    parser.add_argument("--rounds", type=int, help="(default 5; --quick 1)")
    parser.add_argument("--pollers", type=int, default=4, help="raw pollers P (default 4)")
    parser.add_argument("--max", type=int, default=100, help="each raw poll's max M (default 100)")
    parser.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=[],
        help="run the workers with each of these batch sizes (default: their default)",
    )
    parser.add_argument(
        "--client",
        type=Path,
        default=CLIENT_PATH,
        help="folder holding the hourglass_client package to measure, e.g. an older "
        "checkout's clients/python (default: this checkout's)",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="run each worker with its tracing off and on (opentelemetry-api, no SDK)",
    )
    args = parser.parse_args(argv)
    messages = args.messages or (2_000 if args.quick else 50_000)
    plan = Plan(
        messages=messages,
        rounds=args.rounds or (1 if args.quick else 5),
        pollers=args.pollers,
        max=args.max,
        warm_up=0 if args.quick else min(messages, 5_000),
        client=args.client.resolve(),
        batches=tuple(args.batch),
        tracing=args.tracing,
    )
    if not 1 <= plan.concurrency <= 1000:
        parser.error("pollers × max is the workers' concurrency: 1–1000")

    command = "python -m bench.worker " + " ".join(argv if argv is not None else sys.argv[1:])
    started, load_before = time.perf_counter(), os.getloadavg()
    fresh_database(args.database_url)
    with running_server(args.database_url) as server:
        rounds = measure(args.database_url, server, plan)
    load_after = os.getloadavg()
    print(f"```sh\n{command.strip()}\n```\n")
    print(
        f"{plan.messages:,} messages a drain, {plan.rounds} round(s); raw: {plan.pollers} "
        f"pollers × max={plan.max}; workers: concurrency {plan.concurrency}, "
        f"{_opentelemetry()}; "
        + (
            "every message with a traceparent (each batch offered with its own); "
            if plan.tracing
            else "messages without a trace; "
        )
        + (
            ""
            if TYPESCRIPT_BUILT
            else "TypeScript worker left out (not built: npm ci in clients/typescript); "
        )
        + "load average "
        f"{load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        f"{time.perf_counter() - started:.0f} s\n"
    )
    print(report(rounds, plan))


def _opentelemetry() -> str:
    """Whether the workers trace: opentelemetry-api's version, or its absence."""
    try:
        return f"opentelemetry-api {importlib.metadata.version('opentelemetry-api')}, no SDK"
    except importlib.metadata.PackageNotFoundError:
        return "no opentelemetry-api (no tracing)"


if __name__ == "__main__":
    main()
