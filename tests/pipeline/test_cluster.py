"""Both jobs on a Spark standalone cluster the test starts itself: a master and a worker
from the installed PySpark's `spark-class`, on loopback. The executors are JVMs of their
own, in the worker's folder, with their own Python workers: they must find the package
(through the command's interpreter), and the JDBC driver given with `--jars` must travel
to them. Counts add up, and a second import, through `spark-submit` with the package
shipped by `--py-files`, creates nothing.

On PostgreSQL only: every command here starts a JVM on a busy machine (a minute or more
each), and the jobs' database code runs on every database in test_import.py and
test_report.py."""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pyspark
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.pipeline.spark import DEBIAN_JARS
from tests.conftest import FakeClock, truncate_all
from tests.pipeline.conftest import ROOT, bare_path, run_bare
from tests.support.helpers import poll, stored_rows

SPARK_HOME = Path(pyspark.__file__).parent
ROWS = 2000
ACKNOWLEDGED = 10
# A daemon's start, or a job's, takes from seconds to minutes on a busy 2-core machine.
START_SECONDS = 180
JOB_SECONDS = 600
pytestmark = pytest.mark.timeout(4 * JOB_SECONDS)


class _Daemon:
    """A Spark daemon started with spark-class, its log copied to a file as it comes and
    read for the lines that say it is ready."""

    def __init__(self, arguments: list[str], env: dict[str, str], log: Path) -> None:
        self.log = log
        self._lines: list[str] = []
        self._ended = False
        self._changed = threading.Condition()
        self._process = subprocess.Popen(
            [str(SPARK_HOME / "bin" / "spark-class"), *arguments],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # spark-class's launcher and the JVM stop together
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        with open(self.log, "w") as out:
            for line in self._process.stdout:
                out.write(line)
                out.flush()
                with self._changed:
                    self._lines.append(line)
                    self._changed.notify_all()
        with self._changed:
            self._ended = True
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float = START_SECONDS) -> re.Match[str]:
        """The first log line matching `pattern`, waiting for it at most `timeout` s."""
        found: list[re.Match[str]] = []

        def seen() -> bool:
            found.extend(match for line in self._lines if (match := re.search(pattern, line)))
            return bool(found) or self._ended

        with self._changed:
            self._changed.wait_for(seen, timeout)
        if not found:
            tail = "".join(self._lines[-30:])
            raise AssertionError(f"{self.log.name}: no {pattern!r} within {timeout} s:\n{tail}")
        return found[0]

    def stop(self) -> None:
        if self._process.poll() is None:
            os.killpg(self._process.pid, signal.SIGTERM)
            try:
                self._process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self._process.pid, signal.SIGKILL)
                self._process.wait(timeout=60)
        self._reader.join(timeout=60)


@dataclass(frozen=True)
class Cluster:
    url: str  # spark://127.0.0.1:PORT
    work: Path  # the worker's folder: one per application, one inside per executor


def _spark_env(home: Path) -> dict[str, str]:
    env = {
        "PATH": bare_path(),
        "HOME": str(home),
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": "127.0.0.1",  # loopback, whatever the host name resolves to
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return env


@pytest.fixture(scope="module")
def cluster(java: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A standalone master and one worker (1 core, 1 GiB) on loopback, on free ports."""
    base = tmp_path_factory.mktemp("cluster")
    # The master's REST submission server would take the fixed port 6066.
    env = _spark_env(base) | {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"}
    loopback = ["--host", "127.0.0.1", "--port", "0", "--webui-port", "0"]
    master = _Daemon(["org.apache.spark.deploy.master.Master", *loopback], env, base / "master.log")
    try:
        url = master.wait_for(r"Starting Spark master at (spark://\S+)").group(1)
        master.wait_for(r"New state: ALIVE")
        worker = _Daemon(
            [
                *("org.apache.spark.deploy.worker.Worker", *loopback),
                *("--cores", "1", "--memory", "1g", "--work-dir", str(base / "work"), url),
            ],
            env,
            base / "worker.log",
        )
        try:
            worker.wait_for(r"Successfully registered with master")
            yield Cluster(url, base / "work")
        finally:
            worker.stop()
    finally:
        master.stop()


@pytest.fixture(scope="module")
def without_the_package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python with the pipeline's dependencies and not this package: a worker's, to
    which spark-submit ships it."""
    path = tmp_path_factory.mktemp("venv") / "dependencies"
    venv.EnvBuilder(symlinks=True, with_pip=False).create(path)
    (site_packages,) = path.glob("lib/python*/site-packages")
    found = [entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))]
    (site_packages / "dependencies.pth").write_text("\n".join(found) + "\n")
    python = path / "bin" / "python"
    lacking = run_bare([str(python), "-c", "import pyarrow, sqlalchemy, app"], path)
    assert "No module named 'app'" in lacking.stderr, lacking.stderr
    return python


def _zip_of_the_package(path: Path) -> Path:
    """app/ as a zip for --py-files (its migrations, a link in a checkout, stay out)."""
    with zipfile.ZipFile(path, "w") as archive:
        for folder, folders, files in os.walk(ROOT / "app"):
            folders[:] = [name for name in folders if name not in ("__pycache__", "migrations")]
            for name in files:
                archive.write(Path(folder, name), Path(folder, name).relative_to(ROOT))
    return path


def _run(
    command: list[str], cwd: Path, database_url: str, **variables: str
) -> subprocess.CompletedProcess:
    result = run_bare(
        command,
        cwd,
        timeout=JOB_SECONDS,
        HOURGLASS_DATABASE_URL=database_url,
        SPARK_HOME=str(SPARK_HOME),
        SPARK_LOCAL_IP="127.0.0.1",
        **variables,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    return result


def _counts(result: subprocess.CompletedProcess) -> dict[str, str]:
    return dict(line.split(": ", 1) for line in result.stdout.splitlines() if ": " in line)


def test_both_jobs_run_on_a_standalone_cluster(
    cluster, environment, without_the_package, postgresql_url, tmp_path
):
    truncate_all(postgresql_url)
    path = tmp_path / "in.csv"
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "scheduled_at"])
        writer.writerows(("q", f"k{n}", str(n), "2026-01-01T00:00:00Z") for n in range(ROWS))
        writer.writerow(("q", "broken", "not json", ""))
    hourglass = str(environment / "bin" / "hourglass")
    python = str(environment / "bin" / "python")

    first = _run(
        [hourglass, "pipeline", "import", str(path), "--master", cluster.url],
        tmp_path,
        postgresql_url,
    )
    lines = first.stdout.splitlines()
    assert f"created: {ROWS}" in lines and f"rows: {ROWS + 1}" in lines
    assert "rejected: 1 (0 duplicate keys)" in lines
    stored = stored_rows(postgresql_url)
    assert len(stored) == ROWS
    # The work ran in the cluster's executors, whose Python imported the package.
    (application,) = cluster.work.glob("app-*")
    assert list(application.glob("*/stderr"))

    # Again through spark-submit, with its documented entry, on workers whose Python
    # lacks the package: --py-files ships it. Nothing new. (The job imports the zip
    # too, whose migrations are left out: the database is migrated already.)
    entry = run_bare([python, "-c", "import app.submit as m; print(m.__file__)"], tmp_path)
    submit = [
        *(str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster.url),
        *("--conf", f"spark.pyspark.driver.python={python}"),
        *("--conf", f"spark.pyspark.python={without_the_package}"),
        *("--py-files", str(_zip_of_the_package(tmp_path / "hourglass.zip"))),
        *(entry.stdout.strip(), "import", str(path)),
    ]
    again = _counts(_run(submit, tmp_path, postgresql_url, HOURGLASS_AUTO_MIGRATE="0"))
    assert (again["created"], again["updated"], again["ignored"]) == ("0", "0", str(ROWS))
    assert again["rejected"].startswith("1 ")
    assert stored_rows(postgresql_url) == stored

    # Some history for the report: ten delivered and acknowledged.
    settings = Settings(database_url=postgresql_url, auto_migrate=False)
    with TestClient(create_app(settings, clock=FakeClock())) as client:
        polled = poll(client, "q", max=ACKNOWLEDGED, lease=60)
        assert len(polled["messages"]) == ACKNOWLEDGED
        assert client.delete(f"/v1/queues/q/locks/{polled['lock_id']}").status_code == 204

    # The JDBC driver, from a folder the workers know nothing of: --jars takes it there.
    found = [jar for jar in DEBIAN_JARS if "postgresql" in jar and Path(jar).exists()]
    assert found, "the report needs PostgreSQL's JDBC driver (Debian: libpostgresql-jdbc-java)"
    driver = tmp_path / "drivers" / "postgresql-for-this-test.jar"
    driver.parent.mkdir()
    shutil.copy(found[0], driver)
    output = tmp_path / "report"
    report = [hourglass, "pipeline", "report", "--master", cluster.url, "--output", str(output)]
    _run([*report, "--jars", str(driver)], tmp_path, postgresql_url)
    assert list(cluster.work.glob(f"app-*/*/{driver.name}")), "the driver did not reach them"

    summary = json.loads((output / "summary.json").read_text())
    assert summary["history"]["rows"] == ACKNOWLEDGED
    assert summary["history"]["all_queues"]["acknowledgements"] == ACKNOWLEDGED
    assert summary["queues"]["q"]["ready_now"] == ROWS - ACKNOWLEDGED
    hourly = pq.read_table(output / "hourly").to_pylist()
    assert sum(row["finished"] for row in hourly) == ACKNOWLEDGED
