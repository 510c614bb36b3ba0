"""How other queues fare while one queue's rows are locked from outside.

    python -m bench.isolation                     # PostgreSQL at 127.0.0.1:5432
    python -m bench.isolation --database-url mariadb://root@127.0.0.1:3306/hourglass_isolation

Starts `hourglass serve` (default settings) on a fresh database, then runs phases
of `--seconds` each, alternating, `--rounds` times:
- unlocked: OFFER_CLIENTS clients offer and POLL_CLIENTS clients poll (and
  acknowledge) on queues of their own, one request at a time;
- locked: the same, while another session holds every row of queue `locked`
  (`SELECT … FOR UPDATE` in an open transaction) and LOCKED_CLIENTS clients keep
  updating those rows, each retrying at once on its 503.
Prints, per phase, the p50/p99/max latency of offers and polls on the other
queues, their statuses, those of the locked queue and of /readyz. A request with
no answer within CLIENT_TIMEOUT counts as "timeout".
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import httpx
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import normalize_database_url
from app.storage.schema import upgrade_to_head
from tests.support.locking import locked_from_outside
from tests.support.server import running_server

OFFER_CLIENTS = 2
POLL_CLIENTS = 2
LOCKED_CLIENTS = 12  # more than the pool's ten connections: enough to wait on every one
LOCKED_KEYS = 12
CLIENT_TIMEOUT = 30  # seconds: a request still unanswered then counts as "timeout"


class Phase:
    """Latencies and statuses of one phase, by what was asked."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.latencies: dict[str, list[float]] = {}
        self.statuses: Counter[tuple[str, int | str]] = Counter()
        self._lock = threading.Lock()

    def send(self, what: str, request: Callable[[], httpx.Response]) -> httpx.Response | None:
        """The answer to `request`, or None when none came within the client's timeout."""
        started = time.perf_counter()
        try:
            response = request()
        except httpx.TimeoutException:
            response = None
        took = time.perf_counter() - started
        with self._lock:
            self.latencies.setdefault(what, []).append(took)
            self.statuses[what, response.status_code if response else "timeout"] += 1
        return response

    def report(self) -> str:
        lines = [f"{self.name}:"]
        for what in ("other offer", "other poll"):
            taken = sorted(self.latencies.get(what, []))
            if not taken:
                continue
            p99 = taken[min(len(taken) - 1, int(len(taken) * 0.99))]
            lines.append(
                f"  {what}: {len(taken)} requests, p50 {1000 * statistics.median(taken):.1f} ms, "
                f"p99 {1000 * p99:.1f} ms, max {1000 * taken[-1]:.1f} ms"
            )
        lines.append(f"  statuses: {dict(sorted(self.statuses.items(), key=str))}")
        return "\n".join(lines)


def _fresh_database(url: str) -> None:
    target = make_url(url)
    maintenance = "postgres" if target.get_backend_name() == "postgresql" else "mysql"
    admin = create_engine(target.set(database=maintenance), isolation_level="AUTOCOMMIT")
    quote = admin.dialect.identifier_preparer.quote_identifier
    with admin.connect() as connection:
        force = " WITH (FORCE)" if target.get_backend_name() == "postgresql" else ""
        connection.execute(text(f"DROP DATABASE IF EXISTS {quote(target.database)}{force}"))
        connection.execute(text(f"CREATE DATABASE {quote(target.database)}"))
    admin.dispose()
    upgrade_to_head(url)


def _others(url: str, phase: Phase, number: int, stop: threading.Event) -> None:
    queue = f"other-{number}"
    with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT) as client:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            if number < OFFER_CLIENTS:
                key = f"k{round_}"
                phase.send(
                    "other offer",
                    lambda key=key: client.put(
                        f"/v1/queues/{queue}/messages/{key}", json={"payload": {"n": key}}
                    ),
                )
                continue
            polled = phase.send(
                "other poll", lambda: client.post("/v1/queues/other-0/poll", json={})
            )
            if polled is not None and polled.status_code == 200 and polled.json()["lock_id"]:
                client.delete(f"/v1/queues/other-0/locks/{polled.json()['lock_id']}")
            if round_ % 20 == 0:
                phase.send("readyz", lambda: client.get("/readyz"))


def _locked(url: str, phase: Phase, number: int, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=CLIENT_TIMEOUT) as client:
        round_ = 0
        while not stop.is_set():
            round_ += 1
            key = f"k{number % LOCKED_KEYS}"
            phase.send(
                "locked offer",
                lambda key=key, payload=round_: client.put(
                    f"/v1/queues/locked/messages/{key}", json={"payload": payload}
                ),
            )


def run_phase(url: str, name: str, seconds: float, database_url: str | None) -> Phase:
    """One phase; with `database_url`, the queue `locked` is locked from outside meanwhile."""
    phase = Phase(name)
    stop = threading.Event()
    others = OFFER_CLIENTS + POLL_CLIENTS
    with ThreadPoolExecutor(others + LOCKED_CLIENTS) as pool:
        work = [pool.submit(_others, url, phase, n, stop) for n in range(others)]
        if database_url:
            with locked_from_outside(database_url, "locked"):
                work += [pool.submit(_locked, url, phase, n, stop) for n in range(LOCKED_CLIENTS)]
                stop.wait(seconds)
                stop.set()
        else:
            stop.wait(seconds)
            stop.set()
        for future in work:  # a request still waiting on the lock ends with it
            future.result()
    return phase


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url", default="postgresql://root@127.0.0.1:5432/hourglass_isolation"
    )
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    database_url = normalize_database_url(args.database_url)
    _fresh_database(database_url)
    with running_server(database_url) as server:
        with httpx.Client(base_url=server.url) as client:
            for index in range(LOCKED_KEYS):
                client.put(f"/v1/queues/locked/messages/k{index}", json={"payload": 0})
        for round_ in range(1, args.rounds + 1):
            for name, locked in (("unlocked", None), ("locked", database_url)):
                phase = run_phase(server.url, f"round {round_}, {name}", args.seconds, locked)
                print(phase.report(), flush=True)


if __name__ == "__main__":
    main()
