"""The import's benchmark: `hourglass pipeline import` of N rows against the raw-SQL
batch-insert ceiling, in one run on one PostgreSQL database.

    python -m bench.pipeline                  # 1,000,000 rows, 3 rounds (~5 min)
    python -m bench.pipeline --rows 100000 --rounds 1

The ceiling inserts the same rows with the statement the store's batch offer
sends on PostgreSQL (INSERT … SELECT FROM unnest(…) ON CONFLICT DO NOTHING
RETURNING, 200 rows each), from one connection per core, with no Spark, no
validation and no SQLAlchemy. The import runs as a user runs it, `hourglass
pipeline import` on local Spark with every core; its rate is given with and
without the Spark session's start. Each round starts from an empty, vacuumed
table; the figure is the median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pyarrow as pa
import pyarrow.parquet as pq
from psycopg.types.array import ListBinaryDumper

from app.storage.schema import upgrade_to_head
from bench.hourglass import INSERT_CHUNK, OFFER_ROWS, fresh_database

QUEUE = "bulk"
DUE = "2026-12-01T09:00:00Z"
DUE_MS = 1_796_115_600_000


def _empty(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("TRUNCATE delayed_queue")
        connection.execute("VACUUM ANALYZE delayed_queue")


def _payload(number: int) -> str:
    return f'{{"user":{number},"text":"Your trial ends on Friday"}}'


def _dataset(path: Path, rows: int) -> None:
    pq.write_table(
        pa.table(
            {
                "key": [f"user-{n}" for n in range(rows)],
                "payload": [_payload(n) for n in range(rows)],
                "scheduled_at": [DUE] * rows,
            }
        ),
        path,
    )


def ceiling(dsn: str, rows: int, connections: int) -> dict[str, float]:
    """Rows a second the store's batch INSERT reaches with no Spark and no Python checks,
    and its CPU seconds: the client's (this process) and its backends'."""
    keys = [f"user-{n}" for n in range(rows)]
    payloads = [_payload(n).encode() for n in range(rows)]
    share = -(-rows // connections)
    errors: list[BaseException] = []
    client_cpu: list[float] = []  # each thread's own: the /proc sampler is not the client

    def insert(part: int) -> None:
        started = time.thread_time()
        try:
            with psycopg.connect(
                dsn, autocommit=True, options="-c plan_cache_mode=force_custom_plan"
            ) as connection:
                connection.adapters.register_dumper(list, ListBinaryDumper)
                now = time.time_ns() // 1_000_000
                with connection.cursor() as cursor:
                    for start in range(part * share, min(rows, (part + 1) * share), INSERT_CHUNK):
                        chunk = keys[start : start + INSERT_CHUNK]
                        cursor.execute(
                            OFFER_ROWS,
                            {
                                "queue": QUEUE,
                                "now": now,
                                "keys": chunk,
                                "payloads": payloads[start : start + len(chunk)],
                                "scheduled_ats": [DUE_MS] * len(chunk),
                                "priorities": [0] * len(chunk),
                            },
                        )
                        cursor.fetchall()
        except BaseException as error:  # noqa: BLE001 - reported below
            errors.append(error)
        client_cpu.append(time.thread_time() - started)

    threads = [threading.Thread(target=insert, args=(part,)) for part in range(connections)]
    split = CpuSplit(-1, dsn.rsplit("/", 1)[1])  # its backends, from /proc
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    client = sum(client_cpu)
    backends = split.stop().get("postgresql", 0.0)
    if errors:
        raise errors[0]
    return {
        "ceiling": rows / elapsed,
        "ceiling_cpu_client_s": client,
        "ceiling_cpu_postgresql_s": backends,
    }


_TICKS = os.sysconf("SC_CLK_TCK")


class CpuSplit:
    """CPU seconds of one import by part, sampled from /proc while it runs: the driver
    (the `hourglass` command), the JVM, Spark's Python workers (every other process
    under the driver) and the PostgreSQL backends serving `database` (the server is
    shared: other databases' backends are not counted)."""

    def __init__(self, root: int, database: str, every: float = 0.25) -> None:
        self.root, self.database, self.every = root, database, every
        self.seconds: dict[int, tuple[str, float]] = {}  # by pid, the latest reading
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self.every):
            self.sample()

    def sample(self) -> None:
        parents: dict[int, int] = {}
        readings: dict[int, tuple[str, float, str]] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                stat = Path(entry.path, "stat").read_text()
                command = Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue  # gone meanwhile
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2 :].split()
            parents[int(entry.name)] = int(fields[1])
            cpu = (int(fields[11]) + int(fields[12])) / _TICKS
            readings[int(entry.name)] = (name, cpu, command)
        for pid, (name, cpu, command) in readings.items():
            part = self._part(pid, name, command, parents)
            if part is not None:
                self.seconds[pid] = (part, cpu)

    def _part(self, pid: int, name: str, command: str, parents: dict[int, int]) -> str | None:
        if name.startswith("postgres") and f" {self.database} " in command:
            return "postgresql"
        ancestor = pid
        while ancestor > 1:
            if ancestor == self.root:
                if pid == self.root:
                    return "driver"
                return "jvm" if name == "java" else "python workers"
            ancestor = parents.get(ancestor, 1)
        return None

    def stop(self) -> dict[str, float]:
        self._done.set()
        self._thread.join()
        totals: dict[str, float] = {}
        for part, cpu in self.seconds.values():
            totals[part] = totals.get(part, 0.0) + cpu
        return totals


def _backend_cpu(database: str) -> float:
    """CPU seconds so far of the backends serving `database` (idle ones count too)."""
    split = CpuSplit(-1, database, every=3600)
    split.sample()
    return split.stop().get("postgresql", 0.0)


def hourglass_import(dsn: str, path: Path, rows: int) -> dict[str, float]:
    """The command as a user runs it; its rate with and without the Spark session's start,
    and its CPU seconds by part."""
    database = dsn.rsplit("/", 1)[1]
    backends_before = _backend_cpu(database)
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "app",
            "pipeline",
            "import",
            str(path),
            "--queue",
            QUEUE,
            "--database-url",
            dsn,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYSPARK_PYTHON": sys.executable},
    )
    split = CpuSplit(process.pid, database)
    stdout, stderr = process.communicate()
    elapsed = time.perf_counter() - started
    cpu = split.stop()
    # Backends that were open before (none: the ceiling's have closed) are not the import's.
    cpu["postgresql"] = cpu.get("postgresql", 0.0) - backends_before
    if process.returncode != 0:
        raise RuntimeError(stderr[-3000:])
    printed = dict(line.split(": ", 1) for line in stdout.splitlines() if ": " in line)
    if int(printed["created"]) != rows:
        raise RuntimeError(f"the import created {printed['created']} of {rows} rows")
    job = float(printed["import seconds"])
    return {
        "end_to_end": rows / elapsed,
        "without_startup": rows / job,
        "startup_s": float(printed["spark startup seconds"]),
        **{f"cpu_{part.replace(' ', '_')}_s": seconds for part, seconds in cpu.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--database-url", default="postgresql://root@127.0.0.1:5432/hourglass_bench_import"
    )
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)

    fresh_database(args.database_url)
    upgrade_to_head(args.database_url)  # the ceiling runs first
    cores = os.cpu_count() or 1
    figures: dict[str, list[float]] = {
        "ceiling": [],
        "end_to_end": [],
        "without_startup": [],
        "startup_s": [],
        "load_average": [],
    }
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "rows.parquet"
        _dataset(path, args.rows)
        for _ in range(args.rounds):  # interleaved, so drift in the machine hits both
            _empty(args.database_url)
            for name, value in ceiling(args.database_url, args.rows, cores).items():
                figures.setdefault(name, []).append(value)
            _empty(args.database_url)
            for name, value in hourglass_import(args.database_url, path, args.rows).items():
                figures.setdefault(name, []).append(value)
            figures["load_average"].append(os.getloadavg()[0])
            print({name: round(values[-1], 1) for name, values in figures.items()}, flush=True)
    medians = {name: statistics.median(values) for name, values in figures.items()}
    print(
        f"{args.rows:,} rows, {cores} cores, medians of {args.rounds}: "
        f"ceiling {medians['ceiling']:,.0f} rows/s; import {medians['without_startup']:,.0f} rows/s "
        f"without Spark's start (x{medians['without_startup'] / medians['ceiling']:.2f}), "
        f"{medians['end_to_end']:,.0f} end to end (x{medians['end_to_end'] / medians['ceiling']:.2f}); "
        f"Spark starts in {medians['startup_s']:.1f} s"
    )
    parts = sorted(name for name in medians if name.startswith("cpu_"))
    print(
        "import CPU seconds (medians): "
        + ", ".join(f"{name[4:-2].replace('_', ' ')} {medians[name]:.1f}" for name in parts)
        + f"; load average {medians['load_average']:.1f}"
    )
    ceiling_cpu = medians["ceiling_cpu_client_s"] + medians["ceiling_cpu_postgresql_s"]
    import_cpu = sum(medians[name] for name in parts)
    print(
        f"CPU per row: ceiling {ceiling_cpu / args.rows * 1e6:.1f} µs "
        f"(client {medians['ceiling_cpu_client_s'] / args.rows * 1e6:.1f}, PostgreSQL "
        f"{medians['ceiling_cpu_postgresql_s'] / args.rows * 1e6:.1f}); import "
        f"{import_cpu / args.rows * 1e6:.1f} µs, Spark's start included "
        f"(ceiling / import: x{ceiling_cpu / import_cpu:.2f})"
    )
    if args.json:
        args.json.write_text(
            json.dumps(
                {"rows": args.rows, "cores": cores, "rounds": figures, "medians": medians}, indent=2
            )
        )


if __name__ == "__main__":
    main()
