"""`hourglass pipeline import` on every database: counts that add up, rejects with
reasons, and a second run that creates nothing."""

from __future__ import annotations

import csv
import datetime as dt
import os
import subprocess
import sys

import pytest

from app.domain.messages import IfExists
from app.pipeline.importer import ImportCounts, run_import
from app.storage.tables import group_marks
from tests.conftest import START_MS, truncate_all
from tests.support.helpers import _table_rows, stored_rows

GOOD = [
    ("reminders", "user-1", '{"text": "hi"}', "2026-11-27T09:00:00Z"),
    ("reminders", "user-2", "[1, 2]", "2026-11-27T11:00:00+02:00"),
    ("reminders", "user/3", '"plain text"', ""),  # no time: due now
    ("billing", "user-1", "42", "2026-12-01T00:00:00Z"),  # same key, another queue
]
BAD = [
    ("reminders", "user-4", "not json", "2026-11-27T09:00:00Z"),
    ("no spaces allowed", "user-5", "1", "2026-11-27T09:00:00Z"),
    ("reminders", "user-6", "1", "next friday"),
]
DUPLICATE = ("reminders", "user-1", '{"text": "older"}', "2026-11-26T09:00:00Z")


def _write_csv(path, rows) -> str:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "scheduled_at"])
        writer.writerows(rows)
    return str(path)


def _import(spark, database, path, tmp_path, *, if_exists=IfExists.UPDATE, fmt="csv", **options):
    return run_import(
        spark,
        input_path=path,
        input_format=fmt,
        database_url=database.url,
        rejects_path=str(tmp_path / "rejects"),
        columns=options.pop("columns", {}),
        queue=options.pop("queue", None),
        if_exists=if_exists,
        now_ms=START_MS,
        max_payload_bytes=262_144,
        **options,
    )


def test_an_import_schedules_the_valid_rows_and_rejects_the_rest(spark, clean_database, tmp_path):
    path = _write_csv(tmp_path / "in.csv", GOOD + BAD + [DUPLICATE])
    counts = _import(spark, clean_database, path, tmp_path)
    assert counts == ImportCounts(rows=8, created=4, updated=0, ignored=0, rejected=4, duplicates=1)

    stored = {(row["pKind"], row["pKey"]): row for row in stored_rows(clean_database.url)}
    assert set(stored) == {(queue, key) for queue, key, _, _ in GOOD}
    assert stored["reminders", "user-1"]["payload"] == b'{"text":"hi"}'  # the later one won
    assert stored["reminders", "user-2"]["scheduledAt"] == START_MS + 86_400_000
    assert stored["reminders", "user/3"]["scheduledAt"] == START_MS
    assert {row["createdAt"] for row in stored.values()} == {START_MS}
    assert {row["trace"] for row in stored.values()} == {None}  # an import has no trace context

    rejects = {
        (row["key"], row["reason"])
        for row in spark.read.parquet(str(tmp_path / "rejects")).collect()
    }
    assert rejects == {
        ("user-4", "invalid_payload"),
        ("user-5", "invalid_queue"),
        ("user-6", "invalid_scheduled_at"),
        ("user-1", "duplicate_key"),
    }


@pytest.mark.parametrize("if_exists", [IfExists.UPDATE, IfExists.IGNORE])
def test_running_it_again_creates_nothing(spark, clean_database, tmp_path, if_exists):
    path = _write_csv(tmp_path / "in.csv", GOOD + BAD)
    first = _import(spark, clean_database, path, tmp_path, if_exists=if_exists)
    before = stored_rows(clean_database.url)
    again = _import(spark, clean_database, path, tmp_path, if_exists=if_exists)
    assert (first.created, again.created, again.updated) == (4, 0, 0)
    assert again.ignored == 4 and again.rejected == 3
    assert stored_rows(clean_database.url) == before


def test_a_changed_row_updates_or_is_ignored(spark, clean_database, tmp_path):
    _import(spark, clean_database, _write_csv(tmp_path / "a.csv", GOOD), tmp_path)
    changed = [("reminders", "user-1", '{"text": "changed"}', "2026-11-27T09:00:00Z"), *GOOD[1:]]
    path = _write_csv(tmp_path / "b.csv", changed)
    ignored = _import(spark, clean_database, path, tmp_path, if_exists=IfExists.IGNORE)
    assert (ignored.updated, ignored.ignored) == (0, 4)
    updated = _import(spark, clean_database, path, tmp_path)
    assert (updated.updated, updated.ignored) == (1, 3)
    rows = {(row["pKind"], row["pKey"]): row for row in stored_rows(clean_database.url)}
    assert rows["reminders", "user-1"]["payload"] == b'{"text":"changed"}'


def test_a_priority_column_is_stored_checked_and_changed_like_the_other_fields(
    spark, clean_database, tmp_path
):
    path = tmp_path / "in.csv"
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "priority"])
        writer.writerows([("q", "high", "1", "9"), ("q", "none", "2", ""), ("q", "bad", "3", "10")])
    counts = _import(spark, clean_database, str(path), tmp_path)
    assert (counts.created, counts.rejected) == (2, 1)
    stored = {row["pKey"]: row["priority"] for row in stored_rows(clean_database.url)}
    assert stored == {"high": 9, "none": 0}
    rejects = spark.read.parquet(str(tmp_path / "rejects")).collect()
    assert [(row["key"], row["priority"], row["reason"]) for row in rejects] == [
        ("bad", "10", "invalid_priority")
    ]
    # Again with one priority changed: that row is an update, the others are ignored.
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "priority"])
        writer.writerows([("q", "high", "1", "8"), ("q", "none", "2", "")])
    again = _import(spark, clean_database, str(path), tmp_path)
    assert (again.created, again.updated, again.ignored) == (0, 1, 1)
    stored = {row["pKey"]: row["priority"] for row in stored_rows(clean_database.url)}
    assert stored == {"high": 8, "none": 0}


def _write_grouped(path, rows) -> str:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "tenant"])
        writer.writerows(rows)
    return str(path)


GROUPED = [
    ("q", "a1", "1", "tenant-a"),
    ("q", "a2", "2", "tenant-a"),
    ("q", "b1", "3", "tenant/b ✓"),
    ("r", "a1", "4", "tenant-a"),  # the same group in another queue is another group
    ("q", "none", "5", ""),  # an empty field: no group
    ("q", "long", "6", "g" * 200),
]
BAD_GROUPS = [("q", "too-long", "7", "g" * 201), ("q", "control", "8", "tab\there")]


def test_a_group_column_is_stored_checked_and_changed_like_the_other_fields(
    spark, clean_database, tmp_path
):
    path = _write_grouped(tmp_path / "in.csv", GROUPED + BAD_GROUPS)
    counts = _import(spark, clean_database, path, tmp_path, columns={"group": "tenant"})
    assert (counts.created, counts.rejected, counts.rows) == (6, 2, 8)
    stored = {(row["pKind"], row["pKey"]): row for row in stored_rows(clean_database.url)}
    assert {where: row["messageGroup"] for where, row in stored.items()} == {
        ("q", "a1"): "tenant-a",
        ("q", "a2"): "tenant-a",
        ("q", "b1"): "tenant/b ✓",
        ("r", "a1"): "tenant-a",
        ("q", "none"): None,
        ("q", "long"): "g" * 200,
    }
    # Offered as any grouped offer is: marked for the groups' keeper.
    marks = _table_rows(clean_database.url, group_marks, group_marks.c.id)
    assert {(row["queue"], row["messageGroup"]) for row in marks} >= {
        ("q", "tenant-a"),
        ("q", "tenant/b ✓"),
        ("r", "tenant-a"),
        ("q", "g" * 200),
    }
    rejects = spark.read.parquet(str(tmp_path / "rejects")).collect()
    assert sorted((row["key"], row["group"], row["reason"]) for row in rejects) == [
        ("control", "tab\there", "invalid_group"),
        ("too-long", "g" * 201, "invalid_group"),
    ]

    # The same file again: nothing changes, every valid row is ignored.
    before = stored_rows(clean_database.url)
    again = _import(spark, clean_database, path, tmp_path, columns={"group": "tenant"})
    assert (again.created, again.updated, again.ignored, again.rejected) == (0, 0, 6, 2)
    assert stored_rows(clean_database.url) == before

    # A group changed, added or taken away is an update; the rest is ignored.
    changed = [
        ("q", "a1", "1", "tenant-c"),
        ("q", "a2", "2", ""),
        ("q", "none", "5", "tenant-a"),
        *(row for row in GROUPED if row[:2] not in {("q", "a1"), ("q", "a2"), ("q", "none")}),
    ]
    path = _write_grouped(tmp_path / "changed.csv", changed)
    updated = _import(spark, clean_database, path, tmp_path, columns={"group": "tenant"})
    assert (updated.created, updated.updated, updated.ignored) == (0, 3, 3)
    groups = {
        (row["pKind"], row["pKey"]): row["messageGroup"] for row in stored_rows(clean_database.url)
    }
    assert (groups["q", "a1"], groups["q", "a2"], groups["q", "none"]) == (
        "tenant-c",
        None,
        "tenant-a",
    )


def _write_expiring(path, rows) -> str:
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "scheduled_at", "life"])
        writer.writerows(rows)
    return str(path)


DUE = "2026-11-27T09:00:00Z"
EXPIRING = [
    ("q", "minute", "1", DUE, "60"),
    ("q", "now", "2", "", "1.5"),  # due now: expires 1.5 s from now
    ("q", "never", "3", DUE, ""),  # an empty field: no expiry
]
BAD_EXPIRIES = [("q", "zero", "4", DUE, "0"), ("q", "soon", "5", DUE, "soon")]


def test_an_expiry_column_is_stored_checked_and_changed_like_the_other_fields(
    spark, clean_database, tmp_path
):
    path = _write_expiring(tmp_path / "in.csv", EXPIRING + BAD_EXPIRIES)
    counts = _import(spark, clean_database, path, tmp_path, columns={"ttl": "life"})
    assert (counts.created, counts.rejected, counts.rows) == (3, 2, 5)
    due = START_MS + 86_400_000
    expiries = {row["pKey"]: row["expiresAt"] for row in stored_rows(clean_database.url)}
    assert expiries == {"minute": due + 60_000, "now": START_MS + 1_500, "never": None}
    rejects = spark.read.parquet(str(tmp_path / "rejects")).collect()
    assert sorted((row["key"], row["ttl"], row["reason"]) for row in rejects) == [
        ("soon", "soon", "invalid_expiry"),
        ("zero", "0", "invalid_expiry"),
    ]

    # The same file again: nothing changes, every valid row is ignored.
    before = stored_rows(clean_database.url)
    again = _import(spark, clean_database, path, tmp_path, columns={"ttl": "life"})
    assert (again.created, again.updated, again.ignored, again.rejected) == (0, 0, 3, 2)
    assert stored_rows(clean_database.url) == before

    # An expiry changed, added or taken away is an update; the rest is ignored.
    changed = [
        ("q", "minute", "1", DUE, "120"),
        ("q", "now", "2", "", ""),
        ("q", "never", "3", DUE, "30"),
    ]
    path = _write_expiring(tmp_path / "changed.csv", changed)
    updated = _import(spark, clean_database, path, tmp_path, columns={"ttl": "life"})
    assert (updated.created, updated.updated, updated.ignored) == (0, 3, 0)
    expiries = {row["pKey"]: row["expiresAt"] for row in stored_rows(clean_database.url)}
    assert expiries == {"minute": due + 120_000, "now": None, "never": due + 30_000}

    # Parquet, under the fields' own names: a timestamp expires_at and a numeric ttl, one
    # or the other in each row.
    truncate_all(clean_database.url)
    at = dt.datetime(2026, 11, 28, 9, 0, tzinfo=dt.UTC)
    spark.createDataFrame(
        [("q", "at", "1", DUE, at, None), ("q", "ttl", "2", DUE, None, 90.0)]
        + [("q", "both", "3", DUE, at, 90.0), ("q", "negative", "4", DUE, None, -1.0)],
        "queue string, key string, payload string, scheduled_at string, "
        "expires_at timestamp, ttl double",
    ).write.parquet(str(tmp_path / "in.parquet"))
    typed = _import(spark, clean_database, str(tmp_path / "in.parquet"), tmp_path, fmt="parquet")
    assert (typed.created, typed.rejected) == (2, 2)
    expiries = {row["pKey"]: row["expiresAt"] for row in stored_rows(clean_database.url)}
    assert expiries == {"at": due + 86_400_000, "ttl": due + 90_000}
    rejects = spark.read.parquet(str(tmp_path / "rejects")).collect()
    assert sorted(
        (row["key"], row["expires_at"], row["ttl"], row["reason"]) for row in rejects
    ) == [
        ("both", "2026-11-28T09:00:00.000Z", "90.0", "invalid_expiry"),
        ("negative", None, "-1.0", "invalid_expiry"),
    ]


def test_json_lines_into_one_queue(spark, clean_database, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"id": "a", "body": {"nested": [true, null]}, "at": "2026-11-27T09:00:00Z"}\n'
        '{"id": "b", "body": 7}\n'
        "{broken\n"
    )
    counts = _import(
        spark,
        clean_database,
        str(path),
        tmp_path,
        fmt="json",
        queue="events",
        columns={"key": "id", "payload": "body", "scheduled_at": "at"},
    )
    assert (counts.created, counts.rejected, counts.rows) == (2, 1, 3)
    payloads = {row["pKey"]: row["payload"] for row in stored_rows(clean_database.url)}
    assert payloads == {"a": b'{"nested":[true,null]}', "b": b"7"}


def test_the_command_line_prints_the_counts(sqlite_url, tmp_path):
    # Once, on the embedded default: what the command prints does not depend on the
    # database, and the imports above run on every one (a JVM start each, ~25 s).
    truncate_all(sqlite_url)
    path = str(tmp_path / "in.csv")
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "scheduled_at", "tenant", "life"])
        writer.writerows((*row, "tenant-a", "60") for row in GOOD + BAD)
    command = [sys.executable, "-m", "app", "pipeline", "import", path, "--master", "local[1]"]
    result = subprocess.run(
        [*command, "--group-column", "tenant", "--ttl-column", "life"],
        env={**os.environ, "HOURGLASS_DATABASE_URL": sqlite_url},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert "created: 4" in lines and "rejected: 3 (0 duplicate keys)" in lines
    assert "rows: 7" in lines
    assert "rows checked" in result.stderr  # progress
    assert os.path.isdir(path + ".rejects")
    stored = stored_rows(sqlite_url)
    assert {row["messageGroup"] for row in stored} == {"tenant-a"}
    assert {row["expiresAt"] - row["scheduledAt"] for row in stored} == {60_000}


def test_duplicates_spanning_arrow_batches_are_resolved(spark, clean_database, tmp_path):
    rows = [("q", f"k{n // 3}", f'"v{n}"', f"2026-11-27T09:00:0{n % 3}Z") for n in range(30)]
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "2")
    try:
        counts = _import(spark, clean_database, _write_csv(tmp_path / "in.csv", rows), tmp_path)
    finally:
        spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert (counts.created, counts.duplicates, counts.rows) == (10, 20, 30)
    stored = {row["pKey"]: row["payload"] for row in stored_rows(clean_database.url)}
    assert stored == {f"k{n}": f'"v{3 * n + 2}"'.encode() for n in range(10)}  # due last wins
