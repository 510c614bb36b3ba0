"""MariaDB: the service against its raw-SQL ceiling, for offers, batch offers and drains.

    python -m bench.mariadb                 # 3 rounds, ~4 minutes
    python -m bench.mariadb --quick         # 1 short round: does it run?

The ceiling sends the statements the service sends on MariaDB
(app/storage/dialects/mariadb/ and app/storage/statements/, written out here):
the same text, the same transactions and commits, the history recorded on every
acknowledgement, through mysqlclient on one connection per client thread, with
no HTTP, no JSON and no SQLAlchemy. The service runs as `hourglass serve` on the
same database and is driven over HTTP by as many clients. Workloads alternate
between the two, each from an empty table; figures are medians of the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from collections.abc import Callable

import MySQLdb
from sqlalchemy.engine import make_url

from app.config import normalize_database_url
from app.storage.schema import upgrade_to_head
from bench.hourglass import QUEUE, ServiceTarget, now_ms
from bench.http_client import event_loop_factory
from bench.targets import PAYLOAD
from tests.support.server import running_server

LEASE_MS = 30_000
INSERT_CHUNK = 200  # rows per INSERT of a batch, as the store sends them

_COLUMNS = "`pKey`, `pKind`, payload, `scheduledAt`, `scheduledAtInitially`, `createdAt`"
_ROW = "(%s, %s, %s, %s, %s, %s)"
OFFER = f"INSERT IGNORE INTO delayed_queue ({_COLUMNS}) VALUES {_ROW} RETURNING `pKey`"
CLAIM_SELECT = (
    "SELECT id, `pKey`, payload, `scheduledAt`, `scheduledAtInitially`, `createdAt`, "
    "deliveries, `deadLetteredFrom` FROM delayed_queue "
    "WHERE `pKind` = %s AND `scheduledAt` <= %s ORDER BY `scheduledAt` "
    "LIMIT %s FOR UPDATE SKIP LOCKED"
)
CLAIM_UPDATE = (
    "UPDATE delayed_queue SET `scheduledAt` = %s, `lockUuid` = %s, "
    "deliveries = (deliveries + 1), `firstDeliveredAt` = coalesce(`firstDeliveredAt`, %s), "
    "`lastDeliveredAt` = %s WHERE id IN ({ids})"
)
ACKNOWLEDGE = (
    "DELETE FROM delayed_queue WHERE `lockUuid` = %s AND `pKind` = %s RETURNING "
    "`pKind`, `pKey`, `scheduledAtInitially`, `createdAt`, `firstDeliveredAt`, "
    "`lastDeliveredAt`, deliveries"
)
RECORD = (
    "INSERT INTO delivery_history (queue, `key`, `scheduledAt`, `createdAt`, "
    "`firstDeliveredAt`, `lastDeliveredAt`, deliveries, outcome, `finishedAt`) VALUES {rows}"
)
PREFILL = (
    f"INSERT INTO delayed_queue ({_COLUMNS}) "
    "SELECT concat('prefill-', seq), %s, %s, %s + seq, %s + seq, %s FROM seq_1_to_{count}"
)


def _connect(url: str) -> MySQLdb.Connection:
    """A connection set up as the service sets its own up (MariaDBDialect.engine_options)."""
    parts = make_url(url)
    connection = MySQLdb.connect(
        host=parts.host or "localhost",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.database,
        charset="utf8mb4",
        binary_prefix=True,
    )
    connection.cursor().execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
    return connection


def fresh_database(url: str) -> None:
    parts = make_url(url)
    admin = _connect(parts.set(database="mysql").render_as_string(hide_password=False))
    try:
        cursor = admin.cursor()
        cursor.execute(f"DROP DATABASE IF EXISTS `{parts.database}`")
        cursor.execute(f"CREATE DATABASE `{parts.database}`")
    finally:
        admin.close()


def clear(url: str) -> None:
    connection = _connect(url)
    try:
        cursor = connection.cursor()
        cursor.execute("TRUNCATE delayed_queue")
        cursor.execute("TRUNCATE delivery_history")
    finally:
        connection.close()


def prefill(url: str, count: int) -> None:
    """`count` messages due now, one millisecond apart, in one statement (not measured)."""
    connection = _connect(url)
    try:
        due = now_ms() - count
        connection.cursor().execute(
            PREFILL.format(count=count), (QUEUE, PAYLOAD, due, due, now_ms())
        )
        connection.commit()
    finally:
        connection.close()


# -- the ceiling: one thread and one connection per client ------------------------


class Ceiling:
    def __init__(self, connection: MySQLdb.Connection) -> None:
        self.connection = connection
        self.cursor = connection.cursor()

    def offer(self, key: str) -> int:
        now = now_ms()
        self.cursor.execute(OFFER, (key, QUEUE, PAYLOAD, now, now, now))
        assert self.cursor.fetchall()
        self.connection.commit()
        return 1

    def offer_batch(self, keys: list[str]) -> int:
        now = now_ms()
        for start in range(0, len(keys), INSERT_CHUNK):
            chunk = keys[start : start + INSERT_CHUNK]
            statement = f"INSERT IGNORE INTO delayed_queue ({_COLUMNS}) VALUES " + ", ".join(
                [_ROW] * len(chunk)
            )
            values = [v for key in chunk for v in (key, QUEUE, PAYLOAD, now, now, now)]
            self.cursor.execute(statement + " RETURNING `pKey`", values)
            self.cursor.fetchall()
            self.connection.commit()
        return len(keys)

    def drain(self, limit: int) -> int:
        now, lock_id = now_ms(), str(uuid.uuid4())
        self.cursor.execute(CLAIM_SELECT, (QUEUE, now, limit))
        rows = self.cursor.fetchall()
        if rows:
            ids = ", ".join(["%s"] * len(rows))
            self.cursor.execute(
                CLAIM_UPDATE.format(ids=ids),
                (now + LEASE_MS, lock_id, now, now, *(row[0] for row in rows)),
            )
        self.connection.commit()
        if not rows:
            return 0
        self.cursor.execute(ACKNOWLEDGE, (lock_id, QUEUE))
        gone = self.cursor.fetchall()
        history = ", ".join(["(%s, %s, %s, %s, %s, %s, %s, %s, %s)"] * len(gone))
        values = [v for row in gone for v in (*row, "acknowledged", now_ms())]
        self.cursor.execute(RECORD.format(rows=history), values)
        self.connection.commit()
        return len(rows)


def ceiling(url: str, clients: int, seconds: float, step: Callable[[Ceiling, int], int]) -> float:
    """Messages a second `clients` threads reach running `step` for `seconds`."""
    done = [0] * clients
    errors: list[BaseException] = []
    ready = threading.Barrier(clients + 1)

    def client(number: int) -> None:
        try:
            target = Ceiling(_connect(url))
            ready.wait()
            deadline = time.perf_counter() + seconds
            round_ = 0
            while time.perf_counter() < deadline:
                round_ += 1
                moved = step(target, number * 10_000_000 + round_)
                if moved == 0:  # drained
                    break
                done[number] += moved
            target.connection.close()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
            ready.abort()

    threads = [threading.Thread(target=client, args=(number,)) for number in range(clients)]
    for thread in threads:
        thread.start()
    ready.wait()
    started = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return sum(done) / elapsed


# -- the service over HTTP ------------------------------------------------------------


def service(port: int, clients: int, seconds: float, workload: str, limit: int = 1) -> float:
    async def measure() -> float:
        target = ServiceTarget("", "127.0.0.1", port)
        workers = [await target.worker() for _ in range(clients)]
        prefix = uuid.uuid4().hex[:8]
        done = 0
        deadline = time.perf_counter() + seconds

        async def work(number: int, worker) -> None:
            nonlocal done
            round_ = 0
            while time.perf_counter() < deadline:
                round_ += 1
                if workload == "offer":
                    await worker.offer(f"{prefix}-{number}-{round_}", PAYLOAD)
                    done += 1
                elif workload == "batch":
                    keys = [f"{prefix}-{number}-{round_}-{i}" for i in range(1000)]
                    await worker.offer_batch(keys, PAYLOAD)
                    done += 1000
                else:
                    taken = await worker.take(limit)
                    if not taken:
                        return
                    await worker.finish(taken)
                    done += len(taken)

        started = time.perf_counter()
        await asyncio.gather(*(work(number, worker) for number, worker in enumerate(workers)))
        elapsed = time.perf_counter() - started
        await asyncio.gather(*(worker.close() for worker in workers))
        return done / elapsed

    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(measure())


def _batch_keys(number: int) -> list[str]:
    return [f"c-{number}-{i}" for i in range(1000)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5.0, help="per measurement")
    parser.add_argument(
        "--database-url", default="mariadb://root@127.0.0.1:3306/hourglass_bench_mariadb"
    )
    parser.add_argument("--quick", action="store_true", help="1 round, 0.5 s, small queues")
    args = parser.parse_args(argv)
    scale = 50 if args.quick else 1
    if args.quick:
        args.rounds, args.seconds = 1, 0.5
    url = normalize_database_url(args.database_url)
    fresh_database(url)
    upgrade_to_head(url)
    workloads = [  # name, clients, prefill, service's workload and poll size, ceiling's step
        ("offer, 8 clients", 8, 0, ("offer", 1), lambda c, n: c.offer(f"c-{n}")),
        (
            "batch of 1000, 4 clients",
            4,
            0,
            ("batch", 1),
            lambda c, n: c.offer_batch(_batch_keys(n)),
        ),
        ("drain max=1, 8 workers", 8, 100_000 // scale, ("drain", 1), lambda c, n: c.drain(1)),
        (
            "drain max=100, 8 workers",
            8,
            300_000 // scale,
            ("drain", 100),
            lambda c, n: c.drain(100),
        ),
    ]
    figures: dict[str, dict[str, list[float]]] = {
        name: {"service": [], "ceiling": []} for name, *_ in workloads
    }
    with running_server(url) as server:
        for round_ in range(args.rounds):
            for name, clients, count, (workload, limit), step in workloads:
                clear(url)
                if count:
                    prefill(url, count)
                rate = service(server.port, clients, args.seconds, workload, limit)
                figures[name]["service"].append(rate)
                clear(url)
                if count:
                    prefill(url, count)
                figures[name]["ceiling"].append(ceiling(url, clients, args.seconds, step))
                print(
                    f"round {round_ + 1}: {name}: service {rate:,.0f}, "
                    f"ceiling {figures[name]['ceiling'][-1]:,.0f} msg/s",
                    flush=True,
                )
    print(f"\nMariaDB, medians of {args.rounds} rounds, messages a second:\n")
    print("| workload | hourglass | raw-SQL ceiling | ratio |")
    print("|---|---|---|---|")
    for name, values in figures.items():
        ours, ceiling_rate = (statistics.median(values[kind]) for kind in ("service", "ceiling"))
        print(f"| {name} | {ours:,.0f} | {ceiling_rate:,.0f} | {ours / ceiling_rate:.2f} |")


if __name__ == "__main__":
    main()
