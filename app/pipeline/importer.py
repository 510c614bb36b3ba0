"""`hourglass pipeline import`: schedule every valid row of a dataset, from Spark's executors.

Each executor checks its rows a batch at a time by the API's rules
(app/pipeline/batches.py) and writes them through the service's own storage code
(storage.messages.offer_bulk: the batch offer of the HTTP API, whose new keys go
in by COPY on PostgreSQL, decision 20), so a row is created, updated or ignored
exactly as the same offer over HTTP would be. Keys
make it idempotent: a second run, or a run after a crash half-way, schedules
every valid row once.
"""

from __future__ import annotations

import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlalchemy.engine import make_url

from app.config import normalize_database_url
from app.domain.messages import IfExists, Offer
from app.pipeline import BATCH_SIZE, IMPORT_APPLICATION_NAME, transforms
from app.pipeline.rows import Reason


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
    batch_size: int | None = None,
    progress=None,
) -> ImportCounts:
    """Check, offer and count every row in one pass; write the rejects; the counts,
    which add up to the rows read."""
    partitions = 4 * spark.sparkContext.defaultParallelism  # a few per core: progress shows
    raw = read_input(spark, input_path, input_format)
    normalized = transforms.normalize(
        raw, json_lines=input_format == "json", columns=columns, queue=queue
    )
    rows = transforms.co_locate(normalized, 1 if database_url.startswith("sqlite") else partitions)
    seen = spark.sparkContext.accumulator(0)
    written = spark.sparkContext.accumulator(0)
    # The executors' sessions are named, so an operator (or a test) tells them apart.
    sessions_url = named_for_import(database_url)
    work = _check_and_write(
        sessions_url, if_exists, now_ms, max_payload_bytes, batch_size, seen, written
    )
    # One action runs the pass: its output (the rejects, and one row of counts per
    # partition) goes to a scratch dataset, read back below.
    scratch = f"{rejects_path.rstrip('/')}.partial-{uuid.uuid4().hex[:8]}"
    reporter = _Progress(spark, seen, written, progress) if progress else None
    try:
        try:
            rows.mapInArrow(work, _OUTPUT).write.parquet(scratch)
        finally:
            if reporter:
                reporter.stop()
        output = spark.read.parquet(scratch)
        # One job for the counts: the rows without a reason carry each partition's
        # counts, the others are the rejects.
        summary = {
            row["reason"]: row
            for row in output.groupBy("reason")
            .agg(F.count("*").alias("rows"), *(F.sum(name).alias(name) for name in _COUNTS))
            .collect()
        }
        output.where(F.col("reason").isNotNull()).select(*_REJECT_COLUMNS).write.mode(
            "overwrite"
        ).parquet(rejects_path)
    finally:
        _remove(spark, scratch)
    # Every partition yields its counts; an input with no partitions, none.
    totals = summary.pop(None, None)
    total = {name: totals[name] if totals else 0 for name in _COUNTS}
    reasons = {reason: row["rows"] for reason, row in summary.items()}
    counts = ImportCounts(
        rows=total["seen"],
        created=total["created"],
        updated=total["updated"],
        ignored=total["ignored"],
        rejected=sum(reasons.values()),
        duplicates=reasons.get(Reason.DUPLICATE_KEY, 0),
    )
    if counts.created + counts.updated + counts.ignored + counts.rejected != counts.rows:
        raise RuntimeError(f"the counts do not add up: {counts}")
    return counts


def named_for_import(database_url: str) -> str:
    """`database_url` with IMPORT_APPLICATION_NAME as its sessions' application_name on
    PostgreSQL (which psycopg, and so the storage's connections, take from the URL's
    query); as it is when it names one itself, or on another database."""
    url = make_url(database_url)
    if url.get_backend_name() != "postgresql" or "application_name" in url.query:
        return database_url
    named = url.update_query_dict({"application_name": IMPORT_APPLICATION_NAME})
    return named.render_as_string(hide_password=False)


_COUNTS = ("seen", "created", "updated", "ignored")
_OUTPUT = (
    "queue string, key string, payload string, scheduled_at string, priority string, "
    "`group` string, expires_at string, ttl string, reason string, seen long, created long, "
    "updated long, ignored long"
)
_REJECT_COLUMNS = (*transforms.FIELDS, "reason")
_OUTPUT_ARROW = pa.schema(
    [(name, pa.string()) for name in _REJECT_COLUMNS] + [(name, pa.int64()) for name in _COUNTS]
)


def _check_and_write(
    database_url: str,
    if_exists: IfExists,
    now_ms: int,
    max_payload_bytes: int,
    batch_size: int | None,
    seen,
    written,
):
    """What each executor runs on a partition: judge every row (a batch at a time,
    app/pipeline/batches.py), offer the winners in batches through the service's
    batch-offer code (offer_bulk), and yield the rejects and a count."""

    def work(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from app.config import Settings
        from app.pipeline.batches import KeyGroups, check_batch
        from app.storage.blocking import create_blocking_storage

        # The service's own storage, no JDBC writer: its sessions carry the service's
        # bounds (Dialect.session_settings), and its longest transaction is one bulk insert
        # of up to `bulk_rows` (COPY, then INSERT … SELECT): 0.2-0.3 s for 10,000 rows on
        # a busy 2-core machine, idle at most ~0.1 s of it, far within the idle bound.
        store = create_blocking_storage(
            Settings(database_url=database_url, pool_size=1, auto_migrate=False)
        )
        # Offers per call: as many as the bulk path takes in one go, where there is one.
        per_call = batch_size or store.dialect.bulk_rows or BATCH_SIZE
        counts: Counter[str] = Counter()
        pending: dict[str, list[Offer]] = {}
        groups = KeyGroups()

        def offer(winners: list) -> None:
            for queue, key, payload, due, priority, group, expires_at in winners:
                offers = pending.setdefault(queue, [])
                offers.append(Offer(key, payload, due, if_exists, priority, group, expires_at))
                if len(offers) >= per_call:
                    flush(queue)

        def flush(queue: str) -> None:
            offers = pending.pop(queue)
            counts.update(
                outcome.value for outcome in store.messages.offer_bulk(queue, offers, now_ms)
            )
            written.add(len(offers))

        try:
            for batch in batches:
                counts["seen"] += batch.num_rows
                seen.add(batch.num_rows)
                verdicts = check_batch(batch, now_ms=now_ms, max_payload_bytes=max_payload_bytes)
                rejected = pc.is_valid(verdicts.reasons)
                if pc.any(rejected).as_py():
                    yield _rejects(batch.filter(rejected), pc.filter(verdicts.reasons, rejected))
                winners, duplicates = groups.add(batch, verdicts)
                if duplicates:
                    yield _batch([(*fields, Reason.DUPLICATE_KEY) for fields in duplicates])
                offer(winners)
            offer(groups.finish())
            for queue in list(pending):
                flush(queue)
        finally:
            store.close()
        yield pa.RecordBatch.from_pydict(
            {name: [None] for name in _REJECT_COLUMNS} | {name: [counts[name]] for name in _COUNTS},
            schema=_OUTPUT_ARROW,
        )

    return work


def _rejects(rows: pa.RecordBatch, reasons: pa.Array) -> pa.RecordBatch:
    """Rejected rows as an output batch: their fields as read, and why."""
    nothing = pa.nulls(len(rows), pa.int64())
    return pa.RecordBatch.from_arrays(
        [*(rows.column(name) for name in transforms.FIELDS), reasons] + [nothing] * len(_COUNTS),
        schema=_OUTPUT_ARROW,
    )


def _batch(rejects: list[tuple]) -> pa.RecordBatch:
    """The rejects gathered so far as one output batch; `rejects` is emptied."""
    columns = dict(zip(_REJECT_COLUMNS, map(list, zip(*rejects, strict=True)), strict=True))
    columns |= {name: [None] * len(rejects) for name in _COUNTS}
    rejects.clear()
    return pa.RecordBatch.from_pydict(columns, schema=_OUTPUT_ARROW)


def _remove(spark: SparkSession, path: str) -> None:
    """Delete a dataset Spark wrote, on whatever file system it is."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None  # a session that is running has its JVM
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()).delete(
        hadoop_path, True
    )


class _Progress:
    """Prints how many rows have been checked and written, every few seconds."""

    def __init__(self, spark: SparkSession, seen, written, out, every: float = 2.0) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._seen = seen
        self._written = written
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
        stages = [
            info
            for stage in self._tracker.getActiveStageIds()
            if (info := self._tracker.getStageInfo(stage)) is not None
        ]
        done = sum(info.numCompletedTasks for info in stages)
        total = sum(info.numTasks for info in stages)
        print(
            f"import: {self._seen.value:,} rows checked, {self._written.value:,} written, "
            f"{done}/{total} tasks done, {time.monotonic() - self._started:.0f} s",
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
        "priority": arguments.priority_column,
        "group": arguments.group_column,
        "expires_at": arguments.expires_at_column,
        "ttl": arguments.ttl_column,
    }
    rejects = arguments.rejects or arguments.input.rstrip("/") + ".rejects"
    database_url = (
        normalize_database_url(arguments.database_url)
        if arguments.database_url
        else settings.database_url
    )
    if settings.auto_migrate:  # as `serve` does: a new database works straight away
        from app.storage.schema import upgrade_to_head

        upgrade_to_head(database_url)
    started = time.monotonic()
    spark = spark_session("hourglass import", master=arguments.master, jars=arguments.jars)
    ready = time.monotonic()
    try:
        counts = run_import(
            spark,
            input_path=arguments.input,
            input_format=input_format,
            database_url=database_url,
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
