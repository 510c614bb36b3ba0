"""One workload against a service that is already running, for profiling between full runs.

    HOURGLASS_DATABASE_URL=postgresql://root@127.0.0.1:5432/hourglass_probe \\
        hourglass serve --port 8181 --no-access-log &
    python -m bench.probe --port 8181 drain --clients 4 --max 1
    py-spy record --pid <server pid> --duration 5 --format raw -o poll.txt &  # meanwhile

Prints messages (or requests) per second and the server's CPU time per request,
read from /proc.

`compare` measures, in one run, a bare uvicorn ASGI app answering a fixed 200 (started
here, on --bare-port), the floor of the stack (bench/floor.py, started here on
--floor-port, on the same database) and the service: the service's `GET /healthz`, and
the floor's and the service's empty poll and new-key offer, each for --seconds,
--rounds times in turn. It prints the load average at the start, each one's median
server CPU per request, its ratio to the bare app's, and the service's to the floor's
(the target: a single offer and an empty poll each at most 1.2x the floor's):

    python -m bench.probe --port 8181 compare --clients 4 --rounds 5

One short run on a shared machine is noisy: repeat it, and trust bench/run.py's medians
for anything written down.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from bench.accounting import process_cpu
from bench.floor import DSN_VARIABLE
from bench.hourglass import ServiceTarget
from bench.http_client import Connection, event_loop_factory
from bench.targets import PAYLOAD

# One request on a connection: (connection, its number) -> awaitable.
Request = Callable[[Connection, int], Awaitable[None]]


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


async def _listening(port: int) -> None:
    """Returns once something answers HTTP on 127.0.0.1:`port` (5 s at most)."""
    for _ in range(100):
        connection = Connection("127.0.0.1", port)
        try:
            await connection.request("GET", "/")
            return
        except OSError:
            await asyncio.sleep(0.05)
        finally:
            await connection.close()
    raise SystemExit(f"nothing answers on port {port}")


def load_average() -> str:
    """/proc/loadavg's 1, 5 and 15 minute averages, with the cores they share."""
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) + f" ({os.cpu_count()} cores)"


async def compare(args: argparse.Namespace, bare_pid: int, floor_pid: int) -> None:
    started_under = load_average()
    dsn = f"postgresql://root@127.0.0.1:5432/{args.database}"
    await ServiceTarget(dsn, "127.0.0.1", args.port).clear()
    await _listening(args.bare_port)
    await _listening(args.floor_port)
    pid = args.pid or _server_pid(args.port)
    prefix, keys = uuid.uuid4().hex[:8], itertools.count()
    offer_body = b'{"payload":' + PAYLOAD + b',"delay":3600}'

    def empty_poll(connection: Connection, number: int) -> Awaitable[None]:
        return _expect(connection, 200, "POST", "/v1/queues/empty/poll", b'{"max":1}')

    def new_key_offer(connection: Connection, number: int) -> Awaitable[None]:
        path = f"/v1/queues/probe/messages/{prefix}-{next(keys)}"
        return _expect(connection, 201, "PUT", path, offer_body)

    # name: (port, server pid, request, the floor's name for the same request)
    workloads: dict[str, tuple[int, int, Request, str | None]] = {
        "bare uvicorn app": (
            args.bare_port,
            bare_pid,
            lambda c, i: _expect(c, 200, "GET", "/"),
            None,
        ),
        "GET /healthz": (args.port, pid, lambda c, i: _expect(c, 200, "GET", "/healthz"), None),
        "floor empty poll": (args.floor_port, floor_pid, empty_poll, None),
        "empty poll (max=1)": (args.port, pid, empty_poll, "floor empty poll"),
        "floor new-key offer": (args.floor_port, floor_pid, new_key_offer, None),
        "new-key offer": (args.port, pid, new_key_offer, "floor new-key offer"),
    }
    samples: dict[str, list[float]] = {name: [] for name in workloads}
    for _ in range(args.rounds):
        for name, (port, server, request, _floor) in workloads.items():
            samples[name].append(
                await _cpu_per_request(port, server, args.clients, args.seconds, request)
            )
    medians = {name: statistics.median(values) for name, values in samples.items()}
    reference = medians["bare uvicorn app"]
    print(f"load average at the start: {started_under}; at the end: {load_average()}")
    print(
        f"{args.clients} clients, {args.rounds} rounds of {args.seconds:g} s; "
        "server CPU per request, medians:"
    )
    print(f"  {'':20} {'median':>9} {'x bare':>7} {'x floor':>8}   rounds")
    for name, (_port, _server, _request, floor) in workloads.items():
        median = medians[name]
        runs = " ".join(f"{value:.0f}" for value in samples[name])
        to_floor = f"{median / medians[floor]:7.2f}x" if floor else ""
        print(f"  {name:20} {median:6.0f} µs {median / reference:6.1f}x {to_floor:>8}   ({runs})")
    print("  target: the service's empty poll and new-key offer each at most 1.20x the floor's")


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
    parser.add_argument("--floor-port", type=int, default=8183, help="for compare's floor")
    args = parser.parse_args()
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        if args.workload != "compare":
            runner.run(probe(args))
            return
        uvicorn = [sys.executable, "-m", "uvicorn", "--no-access-log", "--log-level", "warning"]
        uvicorn += [
            "--http",
            "httptools",
            "--loop",
            "uvloop" if event_loop_factory() else "asyncio",
        ]
        floor_dsn = f"postgresql://root@127.0.0.1:5432/{args.database}"
        bare = subprocess.Popen([*uvicorn, "bench.probe:bare_app", "--port", str(args.bare_port)])
        floor = subprocess.Popen(
            [*uvicorn, "bench.floor:app", "--port", str(args.floor_port)],
            env={**os.environ, DSN_VARIABLE: floor_dsn},
        )
        try:
            runner.run(compare(args, bare.pid, floor.pid))
        finally:
            for server in (bare, floor):
                server.terminate()
                server.wait()


if __name__ == "__main__":
    main()
