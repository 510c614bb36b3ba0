"""`hourglass pipeline import`: schedule every valid row of a dataset, from Spark's executors.

Each executor writes its partitions through the service's own storage code
(SqlStore.messages_offer_many, the batch offer of the HTTP API), so a row is
created, updated or ignored exactly as the same offer over HTTP would be. Keys
make it idempotent: a second run, or a run after a crash half-way, schedules
every valid row once.
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from app.config import normalize_database_url
from app.pipeline import BATCH_SIZE, transforms
from app.pipeline.rows import Reason
from app.queue.models import IfExists, Offer, Outcome


@dataclass(frozen=True)
class ImportCounts:
    rows: int
    created: int
    updated: int
    ignored: int
    rejected: int
    duplicates: int  # among the rejected

    def lines(self) -> list[str]:
        return [
            f"created: {self.created}",
            f"updated: {self.updated}",
            f"ignored: {self.ignored}",
            f"rejected: {self.rejected} ({self.duplicates} duplicate keys)",
            f"rows: {self.rows}",
        ]


def read_input(spark: SparkSession, path: str, input_format: str) -> DataFrame:
    if input_format == "parquet":
        return spark.read.parquet(path)
    if input_format == "csv":
        # Every column as text; quoted fields may hold commas, quotes and newlines.
        return spark.read.options(header=True, multiLine=True, escape='"').csv(path)
    return spark.read.text(path)  # JSON lines: one `value` per line


def format_of(path: str) -> str:
    suffixes = "".join(Path(path.rstrip("/")).suffixes).lower()
    for name, endings in (
        ("parquet", (".parquet",)),
        ("csv", (".csv",)),
        ("json", (".json", ".jsonl", ".ndjson")),
    ):
        if any(suffixes.endswith(ending) for ending in endings):
            return name
    raise ValueError(f"cannot tell the format of {path!r}: name it with --format")


def run_import(
    spark: SparkSession,
    *,
    input_path: str,
    input_format: str,
    database_url: str,
    rejects_path: str,
    columns: dict[str, str],
    queue: str | None,
    if_exists: IfExists,
    now_ms: int,
    max_payload_bytes: int,
    batch_size: int = BATCH_SIZE,
    progress=None,
) -> ImportCounts:
    """Validate, write the rejects, offer the rest; the counts, which add up to the rows."""
    # Partitions of the write: a few per core, so that progress shows and work evens out.
    spark.conf.set("spark.sql.shuffle.partitions", 4 * spark.sparkContext.defaultParallelism)
    raw = read_input(spark, input_path, input_format)
    normalized = transforms.normalize(
        raw, json_lines=input_format == "json", columns=columns, queue=queue
    )
    checked = transforms.resolve_duplicates(
        transforms.validate(normalized, now_ms=now_ms, max_payload_bytes=max_payload_bytes)
    ).persist()
    started = time.monotonic()
    try:
        rows = checked.count()
        rejects = transforms.rejected_rows(checked)
        rejects.write.mode("overwrite").parquet(rejects_path)
        reasons = dict(rejects.groupBy("reason").count().collect())
        rejected = sum(reasons.values())
        if progress:
            print(
                f"import: {rows:,} rows checked, {rejected:,} rejected "
                f"({time.monotonic() - started:.0f} s); writing",
                file=progress,
                flush=True,
            )

        valid = transforms.valid_rows(checked)
        if database_url.startswith("sqlite"):
            valid = valid.coalesce(1)  # one writer: SQLite serialises them anyway
        written = spark.sparkContext.accumulator(0)
        writer = _writer(database_url, if_exists, now_ms, batch_size, written)
        reporter = _Progress(spark, written, rows - rejected, progress) if progress else None
        try:
            outcomes = valid.mapInArrow(
                writer, "created long, updated long, ignored long"
            ).collect()
        finally:
            if reporter:
                reporter.stop()
    finally:
        checked.unpersist()
    counts = ImportCounts(
        rows=rows,
        created=sum(row.created for row in outcomes),
        updated=sum(row.updated for row in outcomes),
        ignored=sum(row.ignored for row in outcomes),
        rejected=rejected,
        duplicates=reasons.get(Reason.DUPLICATE_KEY, 0),
    )
    if counts.created + counts.updated + counts.ignored + counts.rejected != counts.rows:
        raise RuntimeError(f"the counts do not add up: {counts}")
    return counts


def _writer(database_url: str, if_exists: IfExists, now_ms: int, batch_size: int, written):
    """What each executor runs on its partitions: offers in batches, counted by outcome."""

    def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from app.config import Settings
        from app.storage.engine import create_store

        store = create_store(Settings(database_url=database_url, pool_size=1, auto_migrate=False))
        counts: Counter[Outcome] = Counter()
        pending: dict[str, list[Offer]] = {}

        def flush(queue: str) -> None:
            offers = pending.pop(queue)
            counts.update(store.messages_offer_many(queue, offers, now_ms))
            written.add(len(offers))

        try:
            for batch in batches:
                data = batch.to_pydict()
                for queue, key, payload, due in zip(
                    data["queue"],
                    data["key"],
                    data["stored_payload"],
                    data["scheduled_ms"],
                    strict=True,
                ):
                    offers = pending.setdefault(queue, [])
                    offers.append(Offer(key, payload, due, if_exists))
                    if len(offers) >= batch_size:
                        flush(queue)
            for queue in list(pending):
                flush(queue)
        finally:
            store.close()
        yield pa.RecordBatch.from_pydict(
            {
                "created": [counts[Outcome.CREATED]],
                "updated": [counts[Outcome.UPDATED]],
                "ignored": [counts[Outcome.IGNORED]],
            }
        )

    return write


class _Progress:
    """Prints how many rows have been written, every few seconds, while the write runs."""

    def __init__(self, spark: SparkSession, written, total: int, out, every: float = 2.0) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._written = written
        self._total = total
        self._out = out
        self._every = every
        self._done = threading.Event()
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(self._every):
            self._print()

    def _print(self) -> None:
        tasks = [
            info
            for stage in self._tracker.getActiveStageIds()
            if (info := self._tracker.getStageInfo(stage)) is not None
        ]
        done = sum(info.numCompletedTasks for info in tasks)
        total = sum(info.numTasks for info in tasks)
        elapsed = time.monotonic() - self._started
        print(
            f"import: {self._written.value:,} of {self._total:,} rows written, "
            f"{done}/{total} partitions done, {elapsed:.0f} s",
            file=self._out,
            flush=True,
        )

    def stop(self) -> None:
        self._done.set()
        self._thread.join()
        self._print()


def main_import(arguments, settings) -> int:
    """The command line's `pipeline import`."""
    from app.pipeline.spark import spark_session

    input_format = arguments.format or format_of(arguments.input)
    columns = {
        "queue": arguments.queue_column,
        "key": arguments.key_column,
        "payload": arguments.payload_column,
        "scheduled_at": arguments.scheduled_at_column,
    }
    rejects = arguments.rejects or arguments.input.rstrip("/") + ".rejects"
    started = time.monotonic()
    spark = spark_session("hourglass import", master=arguments.master, jars=arguments.jars)
    ready = time.monotonic()
    try:
        counts = run_import(
            spark,
            input_path=arguments.input,
            input_format=input_format,
            database_url=normalize_database_url(arguments.database_url)
            if arguments.database_url
            else settings.database_url,
            rejects_path=rejects,
            columns=columns,
            queue=arguments.queue,
            if_exists=IfExists(arguments.if_exists),
            now_ms=time.time_ns() // 1_000_000,
            max_payload_bytes=settings.max_payload_bytes,
            batch_size=arguments.batch_size,
            progress=sys.stderr,
        )
    finally:
        spark.stop()
    for line in counts.lines():
        print(line)
    print(f"rejects: {rejects}")
    print(f"spark startup seconds: {ready - started:.1f}")
    print(f"import seconds: {time.monotonic() - ready:.1f}")
    return 0
