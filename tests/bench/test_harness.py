"""`python -m bench.run --quick` runs against a real service and writes the JSON the issue asks for.

Peers are left out (they are the [bench] extra's); the figures are not checked,
only that every workload ran and reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import scratch_database

ROOT = Path(__file__).resolve().parents[2]


def _bench(module: str, *arguments: str) -> str:
    """Run `python -m bench.<module> --quick` from the repository's root; what it printed."""
    finished = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", "--quick", *arguments],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr
    return finished.stdout


@pytest.mark.postgresql_only
def test_the_quick_benchmark_runs_and_reports_every_workload(tmp_path):
    output = tmp_path / "bench.json"
    results = ROOT / "bench" / "RESULTS.md"
    recorded = results.read_text()
    with scratch_database("postgresql", "bench") as url:
        plain_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        _bench("run", "--peers", "", "--json", str(output), "--database-url", plain_url)
    workloads = json.loads(output.read_text())["workloads"]
    names = [workload["name"] for workload in workloads]
    for expected in (
        "offer, 1 per request",
        "batch offer",
        "drain, poll max=1",
        "drain, poll max=100",
        "delayed delivery",
        "idle",
        "future messages",
        "after draining",
    ):
        assert any(name.startswith(expected) or expected in name for name in names), expected
    for workload in workloads:
        assert {"name", "unit", "service", "ceiling", "ratio", "peers"} <= set(workload)
        assert workload["peers"] == {}
    throughput = [w for w in workloads if w["unit"] == "msg/s"]
    assert throughput and all(w["service"] > 0 and w["ceiling"] > 0 for w in throughput)
    assert results.read_text() == recorded  # --quick leaves the recorded figures alone


@pytest.mark.server_databases
def test_the_mariadb_benchmark_runs_every_workload_against_its_ceiling():
    with scratch_database("mariadb", "bench") as url:
        printed = _bench("mariadb", "--database-url", url)
    rows = [line for line in printed.splitlines() if line.startswith("| ") and "---" not in line]
    names = [row.split(" | ")[0].lstrip("| ") for row in rows[1:]]
    assert names == [
        "offer, 8 clients",
        "batch of 1000, 4 clients",
        "drain max=1, 8 workers",
        "drain max=100, 8 workers",
    ]
    for row in rows[1:]:
        service, ceiling = (float(cell.replace(",", "")) for cell in row.split(" | ")[1:3])
        assert service > 0 and ceiling > 0, row
