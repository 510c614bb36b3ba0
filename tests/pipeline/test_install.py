"""`hourglass pipeline import` run as a new user runs it: through the absolute path of a
virtual environment that is not on the PATH, whose `python3` lacks the package. Spark's
Python workers must run the command's own interpreter, or the one PYSPARK_PYTHON names."""

from __future__ import annotations

import csv
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def environment(java: None, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtual environment with this checkout and the packages of the interpreter
    running the tests (as `pip install '.[pipeline]'` would give it), and a `hourglass`
    script as pip writes one; it is never put on the PATH."""
    path = tmp_path_factory.mktemp("venv") / "venv"
    venv.EnvBuilder(symlinks=True, with_pip=False).create(path)
    (site_packages,) = path.glob("lib/python*/site-packages")
    # Paths, not site dirs: the running interpreter's own .pth files (an editable
    # install of another checkout) stay out.
    found = [entry for entry in sys.path if entry.endswith(("site-packages", "dist-packages"))]
    (site_packages / "hourglass.pth").write_text("\n".join([str(ROOT), *found]) + "\n")
    script = path / "bin" / "hourglass"
    script.write_text(
        f"#!{path / 'bin' / 'python'}\n"
        "import sys\n"
        "from app.__main__ import main\n"
        "sys.exit(main())\n"
    )
    script.chmod(0o755)
    return path


def _bare_path() -> str:
    """A PATH with Java and the system's tools, and no Python that has the package."""
    java = shutil.which("java")
    assert java is not None  # the java fixture has checked
    return os.pathsep.join(dict.fromkeys([os.path.dirname(java), "/usr/bin", "/bin"]))


def _run(command: list[str], cwd: Path, **variables: str) -> subprocess.CompletedProcess:
    # Only what a login gives, and nothing of the interpreter running the tests: no
    # PYTHONPATH, no PYSPARK_PYTHON, no virtual environment.
    env = {"PATH": _bare_path(), "HOME": os.environ.get("HOME", str(cwd)), **variables}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=280, check=False
    )


def _import(environment: Path, tmp_path: Path, **variables: str) -> subprocess.CompletedProcess:
    path = tmp_path / "in.csv"
    with open(path, "w", newline="") as file:
        writer = csv.writer(file)
        writer.writerow(["queue", "key", "payload", "scheduled_at"])
        writer.writerows([("q", "a", "1", ""), ("q", "b", '{"x": 2}', ""), ("q", "c", "bad", "")])
    return _run(
        [str(environment / "bin" / "hourglass"), "pipeline", "import", str(path)]
        + ["--master", "local[1]"],
        tmp_path,  # a Python worker started in the checkout would find `app` there
        HOURGLASS_DATABASE_URL=f"sqlite:///{tmp_path / 'hourglass.db'}",
        **variables,
    )


def test_the_workers_run_the_commands_python(environment, tmp_path):
    # What makes the test: the `python3` Spark would otherwise start cannot import app.
    if (python3 := shutil.which("python3", path=_bare_path())) is not None:
        plain = _run([python3, "-c", "import app"], tmp_path)
        assert plain.returncode != 0, f"{python3} has the package: the test would prove nothing"
    installed = _run(
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
