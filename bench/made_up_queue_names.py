"""Empty polls of made-up queue names against `hourglass serve`: what they leave in
/metrics and in the server's memory (before their series were bounded, 40,000 of them
added 12.5 MB to every scrape and 13 MB to the server, until a restart).

    python -m bench.made_up_queue_names [--polls 40000] [--connections 8] [--rounds 2]

The server is `python -m app serve` started from the current directory (run it from
another checkout to measure that one) on a fresh SQLite database. The memory figure
is the server's resident set (VmRSS), before and after the polls: it includes the
allocator's high-water mark, so read it as a bound, not an exact cost.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

from bench.http_client import Connection
from tests.support.server import running_server


def resident_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def scrape(port: int) -> tuple[int, int]:
    """/metrics: its size in bytes and its number of samples."""
    connection = Connection("127.0.0.1", port)
    try:
        status, body = await connection.request("GET", "/metrics")
    finally:
        await connection.close()
    assert status == 200, status
    samples = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return len(body), samples


async def poll_made_up_names(port: int, polls: int, connections: int, prefix: str) -> float:
    """`polls` empty polls, each of a queue name never used before; seconds taken."""
    names = iter(range(polls))

    async def client() -> None:
        connection = Connection("127.0.0.1", port)
        try:
            for index in names:
                answer = await connection.json("POST", f"/v1/queues/{prefix}-{index:08d}/poll", {})
                assert answer["messages"] == [], answer
        finally:
            await connection.close()

    started = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(connections)))
    return time.perf_counter() - started


async def measure(port: int, pid: int, polls: int, connections: int, rounds: int) -> None:
    await poll_made_up_names(port, 200, connections, "warm-up")  # every code path once
    await scrape(port)
    for round_ in range(1, rounds + 1):
        size_before, samples_before = await scrape(port)
        rss_before = resident_kib(pid)
        seconds = await poll_made_up_names(port, polls, connections, f"made-up-{round_}")
        size_after, samples_after = await scrape(port)
        rss_after = resident_kib(pid)
        print(
            f"round {round_}: {polls} polls of made-up names in {seconds:.1f} s over "
            f"{connections} connections; /metrics {size_before:,} -> {size_after:,} bytes, "
            f"{samples_before:,} -> {samples_after:,} samples; server RSS {rss_before:,} -> "
            f"{rss_after:,} KiB ({rss_after - rss_before:+,} KiB)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--polls", type=int, default=40_000)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=2, help="each with new names")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        url = f"sqlite:///{directory}/made-up-names.db"
        with running_server(url) as server:
            asyncio.run(
                measure(
                    server.port,
                    server.pid,
                    arguments.polls,
                    arguments.connections,
                    arguments.rounds,
                )
            )


if __name__ == "__main__":
    main()
