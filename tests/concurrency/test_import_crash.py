"""kill -9 of `hourglass pipeline import` half-way, then the same command again: every
valid row is scheduled exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from sqlalchemy import create_engine, text

from tests.conftest import truncate_all

pytestmark = pytest.mark.postgresql_only

ROWS = 100_000
STARTUP_TIMEOUT = 300


def _command(path: str, url: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "app",
        "pipeline",
        "import",
        path,
        "--queue",
        "bulk",
        "--database-url",
        url,
        "--master",
        "local[2]",
    ]


def _stored(url: str) -> tuple[int, int]:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            return tuple(
                connection.execute(
                    text(
                        'SELECT count(*), count(DISTINCT "pKey") FROM delayed_queue '
                        "WHERE \"pKind\" = 'bulk'"
                    )
                ).one()
            )
    finally:
        engine.dispose()


def test_an_import_killed_half_way_and_run_again_schedules_each_row_once(postgresql_url, tmp_path):
    truncate_all(postgresql_url)
    path = str(tmp_path / "bulk.parquet")
    pq.write_table(
        pa.table(
            {
                "key": [f"user-{n}" for n in range(ROWS)],
                "payload": [f'{{"n": {n}}}' for n in range(ROWS)],
                "scheduled_at": ["2026-12-01T09:00:00Z"] * ROWS,
            }
        ),
        path,
    )

    first = subprocess.Popen(
        _command(path, postgresql_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the driver, its JVM and the Python workers: one group
    )
    writing = threading.Event()

    def watch() -> None:
        for line in first.stderr:  # progress: "import: N rows checked, W written, …"
            if " written, " in line and ", 0 written, " not in line:
                writing.set()
        writing.set()  # it ended

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        assert writing.wait(STARTUP_TIMEOUT), "the import never started writing"
        assert first.poll() is None, "the import finished before it could be killed"
        os.killpg(first.pid, signal.SIGKILL)
    finally:
        first.wait(60)
        watcher.join(60)
    written, _ = _stored(postgresql_url)
    assert 0 < written < ROWS  # killed half-way

    again = subprocess.run(
        _command(path, postgresql_url), capture_output=True, text=True, timeout=600, check=False
    )
    assert again.returncode == 0, again.stderr[-3000:]
    counts = dict(line.split(": ", 1) for line in again.stdout.splitlines() if ": " in line)
    created, ignored = int(counts["created"]), int(counts["ignored"])
    # What the killed run wrote is ignored now (its last statements may have
    # committed after the count above); the rest is created; nothing twice.
    assert created + ignored == ROWS and ignored >= written and created > 0
    assert _stored(postgresql_url) == (ROWS, ROWS)
