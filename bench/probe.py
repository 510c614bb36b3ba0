"""One workload against a service that is already running, for profiling between full runs.

    HOURGLASS_DATABASE_URL=postgresql://root@127.0.0.1:5432/hourglass_probe \\
        hourglass serve --port 8181 --no-access-log &
    python -m bench.probe --port 8181 drain --clients 4 --max 1
    py-spy record --pid <server pid> --duration 5 --format raw -o poll.txt &  # meanwhile

Prints messages (or requests) per second and the server's CPU time per request,
read from /proc. One short run on a shared machine is noisy: repeat it, and
trust bench/run.py's medians for anything written down.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from pathlib import Path

from bench.accounting import process_cpu
from bench.hourglass import ServiceTarget
from bench.http_client import event_loop_factory
from bench.targets import PAYLOAD


async def probe(args: argparse.Namespace) -> None:
    dsn = f"postgresql://root@127.0.0.1:5432/{args.database}"
    service = ServiceTarget(dsn, "127.0.0.1", args.port)
    if args.workload != "empty-poll":
        await service.clear()
    if args.workload == "drain":
        await service.prefill(200_000, PAYLOAD)
    workers = [await service.worker() for _ in range(args.clients)]
    prefix = uuid.uuid4().hex[:8]
    messages = requests = 0
    deadline = time.perf_counter() + args.seconds

    async def work(number: int, worker) -> None:
        nonlocal messages, requests
        round_ = 0
        while time.perf_counter() < deadline:
            round_ += 1
            if args.workload == "offer":
                await worker.offer(f"{prefix}-{number}-{round_}", PAYLOAD)
                messages, requests = messages + 1, requests + 1
            elif args.workload == "batch":
                keys = [f"{prefix}-{number}-{round_}-{i}" for i in range(1000)]
                await worker.offer_batch(keys, PAYLOAD)
                messages, requests = messages + 1000, requests + 1
            elif args.workload == "drain":
                taken = await worker.take(args.max)
                await worker.finish(taken)
                messages, requests = messages + len(taken), requests + 2
            else:  # an empty poll: the cost of one statement through the whole stack
                await worker.http.request("POST", "/v1/queues/empty/poll", b'{"max":1}')
                requests += 1

    pid = args.pid or _server_pid(args.port)
    cpu_before, started = process_cpu(pid), time.perf_counter()
    await asyncio.gather(*(work(number, worker) for number, worker in enumerate(workers)))
    elapsed, cpu = time.perf_counter() - started, process_cpu(pid) - cpu_before
    await asyncio.gather(*(worker.close() for worker in workers))
    print(
        f"{args.workload}, {args.clients} clients: {messages / elapsed:,.0f} msg/s, "
        f"{requests / elapsed:,.0f} req/s, server CPU {100 * cpu / elapsed:.0f}% "
        f"= {1e6 * cpu / max(requests, 1):.0f} µs per request"
    )


def _server_pid(port: int) -> int:
    """The pid of the process listening on 127.0.0.1:`port` (from /proc/net/tcp)."""
    inode = None
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # LISTEN
            inode = fields[9]
    if inode is None:
        raise SystemExit(f"nothing listens on port {port}")
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            if fd.readlink().name == f"socket:[{inode}]":
                return int(fd.parts[2])
        except OSError:
            continue
    raise SystemExit(f"no process found for port {port}; pass --pid")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("workload", choices=["offer", "batch", "drain", "empty-poll"])
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--pid", type=int, help="the server's pid (default: found from the port)")
    parser.add_argument("--database", default="hourglass_probe", help="the server's database name")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max", type=int, default=1, help="poll size for drain")
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(probe(args))


if __name__ == "__main__":
    main()
