"""Push delivery's lateness on one and two replicas, and its throughput against
bench's drain through HTTP with `max`=1.

    python -m bench.push             # 1,000 messages over 10 s and 10,000 ready, 3 runs
    python -m bench.push --quick     # 200 over 2 s and 2,000 ready, 1 run: tests/bench

One `hourglass serve` (a second one for the two-replica rounds) on a PostgreSQL database
the run drops and creates, pushing to the tests' receiver (tests/support/push_receiver.py,
always 200) on a thread of this process.

- Lateness: a push queue of default settings (concurrency 4, timeout 10 s); 1,000
  messages due over 10 s, offered in one batch over HTTP 2 s before the first is due;
  a message's lateness is its request's arrival at the receiver (`time.time()` once its
  body is read) less its due time (`scheduled_at_initially`). One replica, then two (a
  second `hourglass serve` on the same database, started for the round: it reads the
  queue's settings as it starts); the rounds alternate.
- Throughput: `--messages` ready messages put in the queue by SQL (no push yet), vacuumed,
  then its push settings put (`concurrency` C): msg/s from that PUT until the receiver
  has answered every message (the queue then checked empty, each acknowledged once).
  Against it, in the same run on the same server and database: bench's drain through
  HTTP (bench/hourglass.py), C workers each polling `max`=1 and acknowledging the lock,
  over the same number of ready messages, the queue's push removed. Both push and drain
  keep at most C messages in flight. The rounds alternate.

Figures are medians over runs, with every run shown.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any

import httpx
import psycopg

from app.domain.formats import format_timestamp, parse_timestamp
from bench.accounting import percentile, postgres_cpu, process_cpu
from bench.hourglass import QUEUE, ServiceTarget, fresh_database, now_ms
from bench.targets import PAYLOAD
from tests.support.push_receiver import PushReceiver, push_receiver
from tests.support.server import Server, running_server

LATENESS_QUEUE = "bench-push"
LEAD_MS = 2000  # offered this long before the first message is due


@dataclass(frozen=True)
class Plan:
    lateness_messages: int
    spread_seconds: float
    messages: int  # ready messages per throughput round
    concurrency: int
    runs: int
    lateness_concurrency: int | None = None  # the lateness queue's; None: the default (4)


@dataclass(frozen=True)
class Lateness:
    """Due time to the request's arrival (ms), and its two parts: due time to the claim
    (the claim's `now`, the history's firstDeliveredAt: the dispatcher's wake-up), and
    claim to arrival (the claim statement, the request's making and sending)."""

    p50: float
    p99: float
    maximum: float
    wake_up_p50: float
    wake_up_p99: float
    sending_p50: float
    sending_p99: float


# -- lateness ------------------------------------------------------------------------------


def lateness_round(
    dsn: str, server: Server, receiver: PushReceiver, plan: Plan, tag: str
) -> Lateness:
    """Offer `plan.lateness_messages` due over the spread; the lateness of their pushes (ms)."""
    receiver.clear()
    first_due = now_ms() + LEAD_MS
    step = plan.spread_seconds * 1000 / plan.lateness_messages
    payload: Any = {"user": 123456, "text": "x" * 70}
    with httpx.Client(base_url=server.url, timeout=60) as client:
        for start in range(0, plan.lateness_messages, 1000):
            items = [
                {
                    "key": f"{tag}-{n}",
                    "payload": payload,
                    "scheduled_at": format_timestamp(first_due + round(n * step)),
                }
                for n in range(start, min(start + 1000, plan.lateness_messages))
            ]
            answer = client.post(f"/v1/queues/{LATENESS_QUEUE}/batch", json={"messages": items})
            answer.raise_for_status()
    if now_ms() > first_due:
        raise RuntimeError("offering took longer than the lead: lateness would be wrong")
    if not receiver.wait_until(
        lambda r: r.succeeded() >= plan.lateness_messages, plan.spread_seconds + 60
    ):
        raise RuntimeError(f"{tag}: {receiver.succeeded()} pushes of {plan.lateness_messages}")
    claimed = claim_times(dsn, tag, plan.lateness_messages)
    late, wake_up, sending = [], [], []
    for receipt in receiver.receipts:
        due = parse_timestamp(receipt.message["scheduled_at_initially"])
        late.append(receipt.arrived * 1000 - due)
        wake_up.append(claimed[receipt.key] - due)
        sending.append(receipt.arrived * 1000 - claimed[receipt.key])
    return Lateness(
        percentile(late, 0.5),
        percentile(late, 0.99),
        max(late),
        percentile(wake_up, 0.5),
        percentile(wake_up, 0.99),
        percentile(sending, 0.5),
        percentile(sending, 0.99),
    )


def claim_times(dsn: str, tag: str, messages: int) -> dict[str, int]:
    """When each message of the round was claimed (ms), from its history row, once every
    acknowledgement is in (the last may still be on its way: another process, polled)."""
    deadline = time.monotonic() + 30
    with psycopg.connect(dsn, autocommit=True) as connection:
        while True:
            rows = connection.execute(
                'SELECT key, "firstDeliveredAt" FROM delivery_history '
                "WHERE queue = %s AND key LIKE %s AND outcome = 'acknowledged'",
                (LATENESS_QUEUE, f"{tag}-%"),
            ).fetchall()
            if len(rows) >= messages or time.monotonic() > deadline:
                return dict(rows)
            time.sleep(0.005)


# -- throughput ----------------------------------------------------------------------------


class Cpu:
    """CPU seconds used by the server, this process (the receiver or the drain's
    workers) and PostgreSQL since it was made."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.before = self._sample()

    def _sample(self) -> tuple[float, float, dict[int, float]]:
        times = os.times()
        return process_cpu(self.server_pid), times.user + times.system, postgres_cpu()

    def per_message_us(self, messages: int) -> str:
        """`server / bench / PostgreSQL` in µs a message."""
        server, bench, postgres = self._sample()
        used = (
            server - self.before[0],
            bench - self.before[1],
            sum(cpu - self.before[2].get(pid, 0.0) for pid, cpu in postgres.items()),
        )
        return " / ".join(f"{1e6 * seconds / messages:.0f}" for seconds in used)


def put_push(server: Server, url: str | None, concurrency: int) -> None:
    push = None if url is None else {"url": url, "concurrency": concurrency}
    answer = httpx.put(f"{server.url}/v1/queues/{QUEUE}/settings", json={"push": push}, timeout=30)
    answer.raise_for_status()


def push_round(
    server: Server, receiver: PushReceiver, target: ServiceTarget, plan: Plan, runner
) -> tuple[float, str]:
    """Messages a second pushed from ready to answered; CPU µs a message."""
    runner.run(target.clear())
    runner.run(target.prefill(plan.messages, PAYLOAD))
    receiver.clear()
    cpu = Cpu(server.pid)
    started = time.time()
    put_push(server, f"{receiver.url}/hook", plan.concurrency)
    if not receiver.wait_until(lambda r: r.succeeded() >= plan.messages, 600):
        raise RuntimeError(f"push: {receiver.succeeded()} of {plan.messages} answered")
    finished = max(receipt.ended for receipt in receiver.receipts)
    used = cpu.per_message_us(plan.messages)
    put_push(server, None, plan.concurrency)
    check_drained(target.dsn, plan.messages)
    if len(receiver.receipts) != plan.messages:
        raise RuntimeError(f"push: {len(receiver.receipts)} requests for {plan.messages}")
    return plan.messages / (finished - started), used


async def drain(target: ServiceTarget, plan: Plan) -> tuple[float, str]:
    """bench's drain: `concurrency` workers polling max=1 and acknowledging, until empty."""
    await target.clear()
    await target.prefill(plan.messages, PAYLOAD)
    workers = [await target.worker() for _ in range(plan.concurrency)]
    delivered = 0

    async def work(worker) -> None:
        nonlocal delivered
        while taken := await worker.take(1):
            await worker.finish(taken)
            delivered += len(taken)

    assert target.pid is not None
    cpu = Cpu(target.pid)
    started = time.perf_counter()
    await asyncio.gather(*(work(worker) for worker in workers))
    elapsed = time.perf_counter() - started
    used = cpu.per_message_us(delivered)
    await asyncio.gather(*(worker.close() for worker in workers))
    return delivered / elapsed, used


def check_drained(dsn: str, messages: int, deadline_seconds: float = 30) -> None:
    """The queue empty and `messages` acknowledgements of one delivery each (the last
    acknowledgements may still be on their way)."""
    deadline = time.monotonic() + deadline_seconds
    with psycopg.connect(dsn, autocommit=True) as connection:
        while True:
            left = connection.execute(
                'SELECT count(*) FROM delayed_queue WHERE "pKind" = %s', (QUEUE,)
            ).fetchone()
            acknowledged = connection.execute(
                "SELECT count(*), max(deliveries) FROM delivery_history "
                "WHERE queue = %s AND outcome = 'acknowledged'",
                (QUEUE,),
            ).fetchone()
            assert left is not None and acknowledged is not None
            if not left[0] and acknowledged[0] == messages and acknowledged[1] == 1:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"not drained once each: {left[0]} left, {acknowledged[0]} acknowledged "
                    f"of {messages}, at most {acknowledged[1]} deliveries"
                )
            time.sleep(0.005)  # another process's commits: nothing to wait on


# -- the run -------------------------------------------------------------------------------


def measure(dsn: str, plan: Plan) -> tuple[dict[str, list[float]], dict[str, list[str]]]:
    """The figures by name, a value per run; and the CPU split of each throughput run."""
    figures: dict[str, list[float]] = {}
    costs: dict[str, list[str]] = {"push": [], "drain": []}

    def add(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    with ExitStack() as stack:
        receiver = stack.enter_context(push_receiver())
        environment = {"HOURGLASS_PUSH_ALLOWED": receiver.url + "/"}
        server = stack.enter_context(running_server(dsn, **environment))
        push: dict[str, Any] = {"url": f"{receiver.url}/hook"}
        if plan.lateness_concurrency is not None:
            push["concurrency"] = plan.lateness_concurrency
        answer = httpx.put(
            f"{server.url}/v1/queues/{LATENESS_QUEUE}/settings", json={"push": push}, timeout=30
        )
        answer.raise_for_status()
        target = ServiceTarget(dsn, "127.0.0.1", server.port, server.pid)
        with asyncio.Runner() as runner:
            for run in range(plan.runs):
                one = lateness_round(dsn, server, receiver, plan, f"one-{run}")
                with running_server(dsn, **environment):
                    two = lateness_round(dsn, server, receiver, plan, f"two-{run}")
                for replicas, figure in (("1 replica", one), ("2 replicas", two)):
                    add(f"lateness p50, {replicas} (ms)", figure.p50)
                    add(f"lateness p99, {replicas} (ms)", figure.p99)
                    add(f"lateness max, {replicas} (ms)", figure.maximum)
                    add(f"due → claim p50, {replicas} (ms)", figure.wake_up_p50)
                    add(f"due → claim p99, {replicas} (ms)", figure.wake_up_p99)
                    add(f"claim → arrival p50, {replicas} (ms)", figure.sending_p50)
                    add(f"claim → arrival p99, {replicas} (ms)", figure.sending_p99)
                pushed, push_cost = push_round(server, receiver, target, plan, runner)
                drained, drain_cost = runner.run(drain(target, plan))
                costs["push"].append(push_cost)
                costs["drain"].append(drain_cost)
                add(f"push, concurrency {plan.concurrency} (msg/s)", pushed)
                add(f"drain max=1, {plan.concurrency} workers (msg/s)", drained)
                add("push / drain", pushed / drained)
                print(
                    f"run {run + 1}: lateness p99 {one.p99:.0f} / {two.p99:.0f} ms, push "
                    f"{pushed:,.0f} msg/s, drain {drained:,.0f} msg/s",
                    file=sys.stderr,
                    flush=True,
                )
    return figures, costs


def report(figures: dict[str, list[float]], costs: dict[str, list[str]]) -> str:
    lines = ["| measurement | median | runs |", "|---|---|---|"]
    for name, values in figures.items():
        digits = 2 if name == "push / drain" else 1 if "→" in name else 0
        runs = " / ".join(f"{value:,.{digits}f}" for value in values)
        lines.append(f"| {name} | {statistics.median(values):,.{digits}f} | {runs} |")
    lines.append("")
    lines.append("CPU µs a message, server / bench process (receiver or drain) / PostgreSQL:")
    for name, runs in costs.items():
        lines.append(f"- {name}: " + "; ".join(runs))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small rounds, one run")
    parser.add_argument(
        "--database-url",
        default="postgresql://root@127.0.0.1:5432/hourglass_bench_push",
        help="PostgreSQL database to drop, create and use (default: %(default)s)",
    )
    parser.add_argument("--runs", type=int, help="(default 3; --quick 1)")
    parser.add_argument(
        "--messages", type=int, help="ready messages per throughput round (10,000; --quick 2,000)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=16, help="push concurrency = drain workers (16)"
    )
    parser.add_argument(
        "--lateness-concurrency",
        type=int,
        help="the lateness queue's push concurrency (default: the setting's default, 4)",
    )
    args = parser.parse_args(argv)
    plan = Plan(
        lateness_messages=200 if args.quick else 1000,
        spread_seconds=2.0 if args.quick else 10.0,
        messages=args.messages or (2_000 if args.quick else 10_000),
        concurrency=args.concurrency,
        runs=args.runs or (1 if args.quick else 3),
        lateness_concurrency=args.lateness_concurrency,
    )
    command = "python -m bench.push " + " ".join(argv if argv is not None else sys.argv[1:])
    started, load_before = time.perf_counter(), os.getloadavg()
    fresh_database(args.database_url)
    figures, costs = measure(args.database_url, plan)
    load_after = os.getloadavg()
    print(f"```sh\n{command.strip()}\n```\n")
    print(
        f"lateness: {plan.lateness_messages:,} messages due over {plan.spread_seconds:.0f} s, "
        f"push concurrency {plan.lateness_concurrency or 'by default (4)'}; "
        f"throughput: {plan.messages:,} ready messages, concurrency {plan.concurrency}; "
        f"{plan.runs} run(s); load average {load_before[0]:.1f} before, "
        f"{load_after[0]:.1f} after; {time.perf_counter() - started:.0f} s\n"
    )
    print(report(figures, costs))


if __name__ == "__main__":
    main()
