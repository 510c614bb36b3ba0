"""One workload against a service that is already running, for profiling between full runs.

    HOURGLASS_DATABASE_URL=postgresql://root@127.0.0.1:5432/hourglass_probe \\
        hourglass serve --port 8181 --no-access-log &
    python -m bench.probe --port 8181 drain --clients 4 --max 1
    py-spy record --pid <server pid> --duration 5 --format raw -o poll.txt &  # meanwhile

Prints messages (or requests) per second and the server's CPU time per request,
read from /proc.

`compare` measures, in one run, a bare uvicorn ASGI app answering a fixed 200 (started
here, on --bare-port) and the service's single offer, empty poll and `GET /healthz`,
each for --seconds, --rounds times in turn; it prints each one's median CPU per request
and its ratio to the bare app's (issue 19):

    python -m bench.probe --port 8181 compare --clients 4 --rounds 5 One short run on a shared machine is noisy: repeat it, and
trust bench/run.py's medians for anything written down.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from bench.accounting import process_cpu
from bench.hourglass import ServiceTarget
from bench.http_client import Connection, event_loop_factory
from bench.targets import PAYLOAD


async def bare_app(scope, receive, send) -> None:
    """The reference: an ASGI app answering every request with a fixed 200."""
    if scope["type"] != "http":  # lifespan: accepted, nothing to start
        while (message := await receive())["type"] != "lifespan.shutdown":
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"2")],
        }
    )
    await send({"type": "http.response.body", "body": b"{}"})


async def _cpu_per_request(port: int, pid: int, clients: int, seconds: float, request) -> float:
    """Server CPU µs per request while `clients` connections send `request(connection, i)`."""
    connections = [Connection("127.0.0.1", port) for _ in range(clients)]
    for connection in connections:  # connected before the clock starts
        await request(connection, 0)
    requests = 0
    deadline = time.perf_counter() + seconds

    async def work(connection: Connection) -> None:
        nonlocal requests
        while time.perf_counter() < deadline:
            requests += 1
            await request(connection, requests)

    cpu_before = process_cpu(pid)
    await asyncio.gather(*(work(connection) for connection in connections))
    cpu = process_cpu(pid) - cpu_before
    await asyncio.gather(*(connection.close() for connection in connections))
    return 1e6 * cpu / max(requests, 1)


async def _expect(connection: Connection, status: int, method: str, path: str, body=None) -> None:
    answer, text = await connection.request(method, path, body)
    if answer != status:
        raise SystemExit(f"{method} {path}: {answer} {text[:200]!r}")


async def compare(args: argparse.Namespace, bare_pid: int) -> None:
    dsn = f"postgresql://root@127.0.0.1:5432/{args.database}"
    await ServiceTarget(dsn, "127.0.0.1", args.port).clear()
    for _ in range(100):  # until the bare app listens
        try:
            await _expect(Connection("127.0.0.1", args.bare_port), 200, "GET", "/")
            break
        except OSError:
            await asyncio.sleep(0.05)
    prefix, keys = uuid.uuid4().hex[:8], itertools.count()
    offer_body = b'{"payload":' + PAYLOAD + b"}"
    workloads = {
        "bare uvicorn app": (
            args.bare_port,
            bare_pid,
            lambda c, i: _expect(c, 200, "GET", "/"),
        ),
        "GET /healthz": (args.port, None, lambda c, i: _expect(c, 200, "GET", "/healthz")),
        "empty poll (max=1)": (
            args.port,
            None,
            lambda c, i: _expect(c, 200, "POST", "/v1/queues/empty/poll", b'{"max":1}'),
        ),
        "single offer": (
            args.port,
            None,
            lambda c, i: _expect(
                c, 201, "PUT", f"/v1/queues/probe/messages/{prefix}-{next(keys)}", offer_body
            ),
        ),
    }
    pid = args.pid or _server_pid(args.port)
    samples: dict[str, list[float]] = {name: [] for name in workloads}
    for _ in range(args.rounds):
        for name, (port, server, request) in workloads.items():
            samples[name].append(
                await _cpu_per_request(port, server or pid, args.clients, args.seconds, request)
            )
    medians = {name: statistics.median(values) for name, values in samples.items()}
    reference = medians["bare uvicorn app"]
    print(f"{args.clients} clients, {args.rounds} rounds of {args.seconds:g} s, medians:")
    for name, median in medians.items():
        runs = " ".join(f"{value:.0f}" for value in samples[name])
        print(f"  {name:20} {median:6.0f} µs  {median / reference:5.1f}x   ({runs})")


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
    parser.add_argument("workload", choices=["offer", "batch", "drain", "empty-poll", "compare"])
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--pid", type=int, help="the server's pid (default: found from the port)")
    parser.add_argument("--database", default="hourglass_probe", help="the server's database name")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--max", type=int, default=1, help="poll size for drain")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=5, help="for compare")
    parser.add_argument("--bare-port", type=int, default=8182, help="for compare's bare app")
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        if args.workload != "compare":
            runner.run(probe(args))
            return
        bare = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "bench.probe:bare_app", "--port", str(args.bare_port)]
            + ["--no-access-log", "--log-level", "warning", "--http", "httptools"]
            + ["--loop", "uvloop" if event_loop_factory() else "asyncio"]
        )
        try:
            runner.run(compare(args, bare.pid))
        finally:
            bare.terminate()
            bare.wait()


if __name__ == "__main__":
    main()
