"""Big polls at once against one `hourglass serve`: their answers, the server's memory, /healthz.

    python -m bench.big_polls                    # 3 polls of max=1000 over 600 x 256 KiB
    python -m bench.big_polls --polls 1 --messages 100

Before answers were bounded in bytes, one poll of max=1000 over 256 KiB payloads
answered 250 MiB and cost the server about twice that; three at once stalled
/healthz. This writes the messages straight into a fresh PostgreSQL database (so
the server's heap has not grown on their way in), starts `hourglass serve` from
the current directory, resets the server's peak-RSS mark
(/proc/<pid>/clear_refs), and sends the polls at once while a client reads
/healthz every 10 ms. It prints the answers' sizes, the server's peak RSS over
its resident size before, and the slowest /healthz. Run it from another
checkout to measure that code.
"""

from __future__ import annotations

import argparse
import threading
import time
from pathlib import Path

import httpx
import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from app.config import Settings, normalize_database_url
from app.domain.messages import IfExists, Offer
from app.storage.blocking import create_blocking_storage
from app.storage.schema import upgrade_to_head
from bench.hourglass import fresh_database
from tests.support.server import running_server

PAYLOAD = b'"' + b"x" * 262_142 + b'"'  # HOURGLASS_MAX_PAYLOAD_BYTES's default, encoded


def _status_bytes(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name == field:
            return int(value.split()[0]) * 1024
    raise SystemExit(f"no {field} in /proc/{pid}/status")


def _prefill(url: str, count: int) -> None:
    store = create_blocking_storage(Settings(database_url=url, auto_migrate=False))
    try:
        due = round(time.time() * 1000) - 60_000
        for start in range(0, count, 10):
            offers = [
                Offer(f"big-{index:05d}", PAYLOAD, due, IfExists.UPDATE)
                for index in range(start, min(start + 10, count))
            ]
            store.messages.offer_many("big", offers, due)
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database", default="postgresql://root@127.0.0.1:5432/hourglass_big_polls"
    )
    parser.add_argument("--polls", type=int, default=3)
    parser.add_argument("--messages", type=int, default=600)
    args = parser.parse_args()
    fresh_database(args.database)
    url = normalize_database_url(args.database)
    upgrade_to_head(url)
    _prefill(url, args.messages)

    with running_server(url) as server, httpx.Client(base_url=server.url, timeout=300) as http:
        assert http.post("/v1/queues/empty/poll", json={"max": 1000}).status_code == 200
        Path(f"/proc/{server.pid}/clear_refs").write_text("5")  # peak RSS := RSS now
        resident = _status_bytes(server.pid, "VmRSS")
        answers: list[int] = []
        health: list[float] = []
        polled = threading.Event()

        def poll() -> None:
            with httpx.Client(base_url=server.url, timeout=300) as own:
                answers.append(len(own.post("/v1/queues/big/poll", json={"max": 1000}).content))

        def watch() -> None:
            with httpx.Client(base_url=server.url, timeout=300) as own:
                while not polled.wait(0.01):
                    started = time.perf_counter()
                    own.get("/healthz")
                    health.append(time.perf_counter() - started)

        watcher = threading.Thread(target=watch)
        watcher.start()
        polls = [threading.Thread(target=poll) for _ in range(args.polls)]
        started = time.perf_counter()
        for thread in polls:
            thread.start()
        for thread in polls:
            thread.join()
        elapsed = time.perf_counter() - started
        polled.set()
        watcher.join()
        peak = _status_bytes(server.pid, "VmHWM")
    answered = sum(answers)
    with psycopg.connect(make_conninfo(args.database, dbname="postgres"), autocommit=True) as admin:
        name = conninfo_to_dict(args.database)["dbname"]
        admin.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))
    print(
        f"{args.polls} polls at once: answers {sorted(round(a / 2**20, 1) for a in answers)} MiB "
        f"in {elapsed:.2f} s; server peak RSS +{(peak - resident) / 2**20:.0f} MiB "
        f"({(peak - resident) / max(answered, 1):.2f}x the answers); slowest /healthz "
        f"{1000 * max(health, default=0):.0f} ms of {len(health)}"
    )


if __name__ == "__main__":
    main()
