"""`python -m bench.calls` counts calls per request for every row of its table: Hourglass
on SQLite here (its statements then run in threads, out of the count: only the harness
is tested, never a figure), the floor on this run's PostgreSQL database."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from app.storage.schema import upgrade_to_head
from bench.calls import ROWS

pytestmark = pytest.mark.postgresql_only

ROOT = Path(__file__).resolve().parents[2]


def test_the_harness_counts_calls_for_every_row(tmp_path, postgresql_url):
    sqlite_url = f"sqlite:///{tmp_path / 'hourglass.db'}"
    upgrade_to_head(sqlite_url)
    floor_dsn = postgresql_url.replace("postgresql+psycopg://", "postgresql://", 1)
    finished = subprocess.run(
        [sys.executable, "-m", "bench.calls", "--database-url", sqlite_url]
        + ["--floor-dsn", floor_dsn, "--requests", "5", "--warmup", "2", "--top", "5"],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    lines = finished.stdout.splitlines()
    for label in ROWS.values():
        row = next(line for line in lines if line.strip().startswith(label))
        calls = float(row.strip()[len(label) :].split()[0])
        assert calls > 0, row
    assert "call sites with most calls" in finished.stdout
