"""`hourglass pipeline import` run as a new user runs it: through the absolute path of a
virtual environment that is not on the PATH, whose `python3` lacks the package. Spark's
Python workers must run the command's own interpreter, or the one PYSPARK_PYTHON names."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

from tests.pipeline.conftest import ROOT, bare_path, run_bare


def _import(environment: Path, tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    path = tmp_path / "in.csv"
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "scheduled_at"])
        writer.writerows([("q", "a", "1", ""), ("q", "b", '{"x": 2}', ""), ("q", "c", "bad", "")])
    return run_bare(
        [str(environment / "bin" / "hourglass"), "pipeline", "import", str(path)]
        + ["--master", "local[1]"],
        tmp_path,  # a Python worker started in the checkout would find `app` there
        HOURGLASS_DATABASE_URL=f"sqlite:///{tmp_path / 'hourglass.db'}",
        **variables,
    )


def test_the_workers_run_the_commands_python(environment, tmp_path):
    # What makes the test: the `python3` Spark would otherwise start cannot import app.
    if (python3 := shutil.which("python3", path=bare_path())) is not None:
        plain = run_bare([python3, "-c", "import app"], tmp_path)
        assert plain.returncode != 0, f"{python3} has the package: the test would prove nothing"
    installed = run_bare(
        [str(environment / "bin" / "python"), "-c", "import app; print(app.__file__)"], tmp_path
    )
    assert installed.stdout.strip() == str(ROOT / "app" / "__init__.py"), installed.stderr

    result = _import(environment, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "No module named" not in result.stderr
    lines = result.stdout.splitlines()
    assert "created: 2" in lines and "rejected: 1 (0 duplicate keys)" in lines


def test_pyspark_python_names_the_workers_python(environment, tmp_path):
    # A Python that notes each start, then runs the environment's.
    marker = tmp_path / "started"
    wrapper = tmp_path / "python"
    wrapper.write_text(
        f'#!/bin/sh\necho started >> "{marker}"\nexec "{environment / "bin" / "python"}" "$@"\n'
    )
    wrapper.chmod(0o755)
    result = _import(environment, tmp_path, PYSPARK_PYTHON=str(wrapper))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "created: 2" in result.stdout.splitlines()
    assert marker.read_text().count("started") >= 1
