"""The pipeline tests' shared parts: a local Spark session (starting one takes seconds), and
an install of this checkout as a new user has it (a virtual environment off the PATH)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from app.pipeline.spark import spark_session

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def spark(java: None) -> Iterator[SparkSession]:
    session = spark_session("hourglass tests", master="local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()


@pytest.fixture(scope="session")
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


def bare_path() -> str:
    """A PATH with Java and the system's tools, and no Python that has the package."""
    java = shutil.which("java")
    assert java is not None  # the java fixture has checked
    return os.pathsep.join(dict.fromkeys([os.path.dirname(java), "/usr/bin", "/bin"]))


def run_bare(
    command: list[str], cwd: Path, *, timeout: float = 280, **variables: str
) -> subprocess.CompletedProcess:
    """`command` with only what a login gives, and nothing of the interpreter running
    the tests: no PYTHONPATH, no PYSPARK_PYTHON, no virtual environment."""
    env = {"PATH": bare_path(), "HOME": os.environ.get("HOME", str(cwd)), **variables}
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
