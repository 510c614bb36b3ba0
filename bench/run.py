"""Hourglass's benchmarks: every workload against the service over HTTP, its raw-SQL
ceiling (the same statements through psycopg in this process) and the peers
pgmq, pgqueuer and procrastinate, all in one run on one PostgreSQL database.

    pip install -e '.[bench]'
    python -m bench.run                          # full run, ~10 min: rewrites bench/RESULTS.md
    python -m bench.run --quick --json /tmp/b.json   # under a minute, smaller counts

The database named by --database-url is dropped and created afresh. The service
runs as `hourglass serve` in its own process; the load comes from this process
through a minimal keep-alive HTTP client, and every figure comes with the CPU
split between the server, this process and PostgreSQL. The `history` workload
starts a second server with HOURGLASS_HISTORY off, to show what recording the
delivery history costs. `neighbour` and `snapshot` (bench/interference.py) time one
queue's polls beside another's 1,000,000 ready messages, and a drain while another
connection holds a snapshot for --hold-seconds (60 s; the full run takes ~3 min more
with them; `--workloads` runs a subset).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import sys
import time
from pathlib import Path

from bench.hourglass import ServiceTarget, fresh_database
from bench.http_client import event_loop_factory
from bench.interference import LEVERS, held_snapshot, noisy_neighbour, server_autovacuum
from bench.report import Row, machine_description, markdown, write_results
from bench.workloads import FULL, QUICK, Bench, Plan
from tests.support.server import Server, running_server


async def run(
    plan: Plan,
    dsn: str,
    server: Server,
    peer_names: list[str],
    workloads: set[str],
    without_history: Server | None = None,
    several: tuple[int, Server] | None = None,
    levers: tuple[str, ...] = ("none",),
) -> list[Row]:
    if peer_names:
        from bench.peers import PEERS  # the [bench] extra: only needed when peers are measured

        peers = [PEERS[name](dsn) for name in peer_names]
    else:
        peers = []
    if several is not None:  # measured as one more column, in the same rounds
        count, multi = several
        peers.append(ServiceTarget(dsn, "127.0.0.1", multi.port, multi.pid, workers_column(count)))
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
        if "drain-on-poll" in workloads:
            # A drain of 100 the way the workers drain: each poll carries the last lock's
            # acknowledgement (decision 21); the ceiling sends the same two statements a round.
            for workers in plan.drain_workers:
                await bench.drain(100, workers, ack_on_poll=True)
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
        if "neighbour" in workloads:
            await noisy_neighbour(bench)
        if "snapshot" in workloads:
            for lever in levers:
                await held_snapshot(bench, LEVERS[lever])
    finally:
        for peer in peers:
            await peer.close()
    return bench.rows


def workers_column(count: int) -> str:
    return f"hourglass --workers {count}"


PEER_NAMES = ("pgmq", "pgqueuer", "procrastinate")  # bench/peers.py's PEERS
WORKLOADS = (
    "offer",
    "batch",
    "drain",
    "drain-on-poll",
    "delayed",
    "scale",
    "history",
    "neighbour",
    "snapshot",
)


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
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="with N > 1, also measure `hourglass serve --workers N` (a second server on the "
        "same database) as one more column, round after round with the others",
    )
    parser.add_argument(
        "--hold-seconds",
        type=float,
        help="how long the snapshot workload holds its snapshot "
        f"(default: {FULL.snapshot_hold:g} s, {QUICK.snapshot_hold:g} s with --quick)",
    )
    parser.add_argument(
        "--snapshot-messages",
        type=int,
        help="the snapshot workload's drain (default: "
        f"{FULL.snapshot_messages:,}, {QUICK.snapshot_messages:,} with --quick)",
    )
    parser.add_argument(
        "--snapshot-levers",
        default="none",
        help="comma-separated, the snapshot workload once for each, in this order: "
        + ", ".join(f"{name} ({lever.what})" for name, lever in LEVERS.items()).replace("%", "%%"),
    )
    parser.add_argument(
        "--server-autovacuum",
        choices=("on", "off"),
        help="turn the PostgreSQL server's autovacuum on or off for the run (ALTER SYSTEM "
        "and a reload; put back as it was at the end); default: leave it as it is",
    )
    args = parser.parse_args(argv)

    plan = QUICK if args.quick else FULL
    if args.hold_seconds is not None:
        plan = dataclasses.replace(plan, snapshot_hold=args.hold_seconds)
    if args.snapshot_messages is not None:
        plan = dataclasses.replace(plan, snapshot_messages=args.snapshot_messages)
    levers = tuple(name for name in args.snapshot_levers.split(",") if name)
    peer_names = [name for name in args.peers.split(",") if name]
    workloads = {name for name in args.workloads.split(",") if name}
    if unknown := (set(peer_names) - set(PEER_NAMES)) | (workloads - set(WORKLOADS)):
        parser.error(f"unknown peers or workloads: {sorted(unknown)}")
    if unknown := set(levers) - set(LEVERS):
        parser.error(f"unknown levers: {sorted(unknown)}")
    command = "python -m bench.run " + " ".join(argv if argv is not None else sys.argv[1:])
    started = time.perf_counter()
    fresh_database(args.database_url)
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(running_server(args.database_url))
        without_history = None
        if "history" in workloads:
            without_history = stack.enter_context(
                running_server(args.database_url, HOURGLASS_HISTORY="false")
            )
        several = None
        if args.workers > 1:
            several = (
                args.workers,
                stack.enter_context(running_server(args.database_url, workers=args.workers)),
            )
        runner = stack.enter_context(asyncio.Runner(loop_factory=event_loop_factory()))
        autovacuum = {"on": True, "off": False}.get(args.server_autovacuum)
        restore = runner.run(server_autovacuum(args.database_url, autovacuum))
        try:
            rows = runner.run(
                run(
                    plan,
                    args.database_url,
                    server,
                    peer_names,
                    workloads,
                    without_history,
                    several,
                    levers,
                )
            )
        finally:
            runner.run(restore())
    if args.workers > 1:
        peer_names.append(workers_column(args.workers))
    machine = machine_description(args.database_url)
    print(f"finished in {time.perf_counter() - started:.0f} s")

    results = args.results or (
        None if args.quick else Path(__file__).resolve().parent / "RESULTS.md"
    )
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
