"""`python -m bench.run --quick` runs against a real service and writes its figures as JSON.

Peers are left out (they are the [bench] extra's); the figures are not checked,
only that every workload ran and reported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from bench.worker import TYPESCRIPT_BUILT
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
        "noisy neighbour: queue B beside",
        "held snapshot",
    ):
        assert any(name.startswith(expected) or expected in name for name in names), expected
    for workload in workloads:
        assert {"name", "unit", "service", "ceiling", "ratio", "peers"} <= set(workload)
        assert workload["peers"] == {}
    # The held snapshot is measured on the service alone, and its drain may end before
    # the hold does (then the "after" window is empty).
    throughput = [
        w for w in workloads if w["unit"] == "msg/s" and not w["name"].startswith("held snapshot")
    ]
    assert throughput and all(w["service"] > 0 and w["ceiling"] > 0 for w in throughput)
    neighbour = [w for w in workloads if w["name"].startswith("noisy neighbour")]
    assert len(neighbour) == 6 and all(w["service"] > 0 and w["ceiling"] > 0 for w in neighbour)
    snapshot = {
        w["name"].split(": ", 1)[1]: w["service"]
        for w in workloads
        if w["name"].startswith("held snapshot")
    }
    assert all(snapshot[f"drain {window}"] > 0 for window in ("before", "during", "after"))
    assert snapshot["dead tuples at the hold's end (pgstattuple)"] > 0
    assert results.read_text() == recorded  # --quick leaves the recorded figures alone


@pytest.mark.postgresql_only
def test_the_held_snapshot_runs_once_per_lever_and_leaves_the_table_as_migrated(tmp_path):
    output = tmp_path / "bench.json"
    levers = ("table-defaults", "fillfactor-70", "lease-beyond-hold")
    with scratch_database("postgresql", "bench") as url:
        plain_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        _bench(
            "run",
            *("--peers", "", "--workloads", "snapshot", "--json", str(output)),
            *("--snapshot-levers", ",".join(levers), "--database-url", plain_url),
        )
        with psycopg.connect(plain_url) as connection:
            row = connection.execute(_TABLE_OPTIONS).fetchone()
    # Each lever undone: the table's storage parameters are migration 0002's again.
    assert row is not None
    assert sorted(row[0]) == sorted(_MIGRATED_OPTIONS)
    names = [workload["name"] for workload in json.loads(output.read_text())["workloads"]]
    for lever in levers:
        assert f"held snapshot, 1 s in a drain of 5,000, lever {lever}: drain before" in names
    assert any("/metrics held back seconds" in name for name in names)


_TABLE_OPTIONS = "SELECT reloptions FROM pg_class WHERE relname = 'delayed_queue'"
# The queue table's storage parameters as migrated (migrations/versions/0002).
_MIGRATED_OPTIONS = (
    "autovacuum_vacuum_scale_factor=0.01",
    "autovacuum_vacuum_threshold=1000",
    "autovacuum_vacuum_insert_scale_factor=0.01",
    "autovacuum_vacuum_insert_threshold=1000",
    "autovacuum_analyze_scale_factor=0.02",
    "autovacuum_analyze_threshold=1000",
    "autovacuum_vacuum_cost_delay=0",
)


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


@pytest.mark.server_databases
def test_the_cron_uninstall_benchmark_runs_on_both_servers():
    with (
        scratch_database("postgresql", "bench") as postgresql_url,
        scratch_database("mariadb", "bench") as mariadb_url,
    ):
        printed = _bench(
            "cron_uninstall", "--postgresql-url", postgresql_url, "--mariadb-url", mariadb_url
        )
    rows = [line.split(" | ") for line in printed.splitlines() if line.startswith("| ")][1:]
    assert [(row[0].lstrip("| "), row[1]) for row in rows] == [
        (server, queue)
        for server in ("postgresql", "mariadb")
        for queue in ("empty queue", "10,000 other messages", "10,000 runs of another entry")
    ]
    assert all(float(row[3]) > 0 for row in rows)


@pytest.mark.server_databases
@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_the_list_benchmark_times_every_page_and_explains_every_statement(server):
    with scratch_database(server, "lists") as url:
        plain_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        plans = _bench("lists", "--database-url", plain_url, "--explain")
        printed = _bench("lists", "--database-url", plain_url, "--drop")
    tables = printed.strip().split("\n\n")
    assert [table.splitlines()[0].split(" | ")[0] for table in tables] == [
        f"| {server}, through the store",
        f"| {server}, over HTTP",
    ]
    for table in tables:
        rows = [line.split(" | ") for line in table.splitlines()[2:]]
        assert len(rows) == 13
        # The same page of the two queues: the same rows, 50 or what the filter finds.
        assert all(row[1] in ("50 / 50", "20 / 20", "10 / 10", "0 / 0") for row in rows), rows
        assert all(float(row[-1].rstrip(" |")) > 0 for row in rows)
    assert plans.count("```") == 2 * 13  # 13 statements, a code block each
    assert ("Index Scan" if server == "postgresql" else "type=range") in plans


@pytest.mark.postgresql_only
def test_the_worker_benchmark_drains_every_variant_and_reports_each():
    """`python -m bench.worker --quick --tracing`: a row per drain, each with its figures
    (not checked), and each worker's tracing on against off, on messages that each carry a
    trace (bench/worker.py fails unless each was stored with one)."""
    with scratch_database("postgresql", "bench") as url:
        plain_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        printed = _bench("worker", "--tracing", "--database-url", plain_url)
    rows = [line.split(" | ") for line in printed.splitlines() if line.startswith("| ")][1:]
    assert [row[0].lstrip("| ") for row in rows] == [
        "raw drain, whole-lock acks",
        "raw drain, per-key acks",
        "AsyncWorker, per-key acks, tracing off",
        "AsyncWorker, per-key acks, tracing on",
        "Worker (threads), per-key acks, tracing off",
        "Worker (threads), per-key acks, tracing on",
        # Left out, and said so, where the TypeScript client is not built (.ci/run builds it).
        *(["TypeScript Worker (Node), per-key acks"] if TYPESCRIPT_BUILT else []),
    ]
    assert ("TypeScript worker left out" in printed) is not TYPESCRIPT_BUILT
    assert "every message with a traceparent" in printed
    for row in rows:
        assert float(row[1].replace(",", "")) > 0  # msg/s
        assert "poll" in row[-1] and "ack" in row[-1]  # requests by route
    costs = [line for line in printed.splitlines() if "tracing on / off" in line]
    assert [line.split(":")[0] for line in costs] == [
        "- AsyncWorker, per-key acks",
        "- Worker (threads), per-key acks",
    ]


def test_the_tracing_cost_benchmark_reports_each_message_kind():
    """`python -m bench.tracing_cost --quick --calls`: a row per kind of message, each with
    its cost a message (not checked) and its calls."""
    printed = _bench("tracing_cost", "--calls")
    rows = [line.split(" | ") for line in printed.splitlines() if line.startswith("| ")][1:]
    assert [row[0].lstrip("| ") for row in rows] == [
        "off",
        "untraced",
        "traced",
        "traced, tracestate",
    ]
    for row in rows:
        assert float(row[1].split()[0]) > 0  # µs a message, Worker's path
        assert all(float(calls) > 0 for calls in row[-1].rstrip(" |").split(" / "))


@pytest.mark.postgresql_only
def test_the_push_benchmark_reports_lateness_on_one_and_two_replicas_and_throughput():
    """`python -m bench.push --quick`: every figure there, each a number (not checked)."""
    with scratch_database("postgresql", "bench") as url:
        plain_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
        printed = _bench("push", "--database-url", plain_url)
    rows = [line.split(" | ") for line in printed.splitlines() if line.startswith("| ")][1:]
    lateness = [
        f"{figure}, {replicas} (ms)"
        for replicas in ("1 replica", "2 replicas")
        for figure in (
            *("lateness p50", "lateness p99", "lateness max"),
            *("due → claim p50", "due → claim p99", "claim → arrival p50", "claim → arrival p99"),
        )
    ]
    throughput = ["push, concurrency 16 (msg/s)", "drain max=1, 16 workers (msg/s)", "push / drain"]
    assert [row[0].lstrip("| ") for row in rows] == lateness + throughput
    assert all(float(row[1].replace(",", "")) > 0 for row in rows[len(lateness) :]), rows
    assert "- push: " in printed and "- drain: " in printed  # CPU a message
