"""Rough HTTP throughput of a running service: batch offer, then poll + ack drains.

A starting point, not the benchmark harness: no raw-SQL ceiling, no peers, the
load generator shares the machine's cores with the server and the database.

    HOURGLASS_DATABASE_URL=postgresql://root@127.0.0.1:5432/hourglass_rough \\
        hourglass serve --no-access-log &
    python bench/rough.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import httpx

PAYLOAD_TEXT = "x" * 80  # with the other fields, about 100 bytes of JSON


def _purge(client: httpx.Client, queue: str) -> None:
    client.delete(f"/v1/queues/{queue}", params={"confirm": queue}).raise_for_status()


def batch_offer(url: str, queue: str, messages: int, clients: int) -> float:
    batches = messages // 1000

    def offer(worker: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as client:
            for batch in range(worker, batches, clients):
                items = [
                    {"key": f"k{batch}-{index}", "payload": {"n": index, "text": PAYLOAD_TEXT}}
                    for index in range(1000)
                ]
                client.post(f"/v1/queues/{queue}/batch", json={"messages": items}).raise_for_status()

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(offer, range(clients)))
    return batches * 1000 / (time.perf_counter() - started)


def drain(url: str, queue: str, batch_size: int, workers: int) -> float:
    def work(_: int) -> int:
        delivered = 0
        with httpx.Client(base_url=url, timeout=60) as client:
            while True:
                body = client.post(f"/v1/queues/{queue}/poll", json={"max": batch_size}).json()
                if not body["messages"]:
                    return delivered
                delivered += len(body["messages"])
                client.delete(f"/v1/queues/{queue}/locks/{body['lock_id']}").raise_for_status()

    started = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        delivered = sum(pool.map(work, range(workers)))
    return delivered / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    arguments = parser.parse_args()

    figures: dict[str, list[float]] = {}
    with httpx.Client(base_url=arguments.url, timeout=60) as client:
        for _ in range(arguments.rounds):
            for queue in ("rough", "rough-single"):
                _purge(client, queue)
            figures.setdefault("batch offer, 1000 per request", []).append(
                batch_offer(arguments.url, "rough", 20_000, arguments.workers)
            )
            figures.setdefault("poll max=100 + ack", []).append(
                drain(arguments.url, "rough", 100, arguments.workers)
            )
            batch_offer(arguments.url, "rough-single", 2_000, arguments.workers)
            figures.setdefault("poll max=1 + ack", []).append(
                drain(arguments.url, "rough-single", 1, arguments.workers)
            )
    for name, values in figures.items():
        runs = ", ".join(f"{value:,.0f}" for value in values)
        print(f"{name:32s} median {statistics.median(values):8,.0f} msg/s   (rounds: {runs})")


if __name__ == "__main__":
    main()
