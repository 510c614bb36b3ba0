"""The command line: `hourglass migrate`, and Alembic's own CLI from the repository root."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect

from app.__main__ import main
from app.storage.schema import head_revision

ROOT = Path(__file__).resolve().parents[2]


def _run(arguments: list[str], database_url: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOURGLASS_DATABASE_URL": database_url}
    return subprocess.run(
        arguments, check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def _revision(url: str) -> str | None:
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return None
            return connection.exec_driver_sql("SELECT version_num FROM alembic_version").scalar()
    finally:
        engine.dispose()


def test_hourglass_migrate_brings_a_new_database_to_head(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    result = _run([sys.executable, "-m", "app", "migrate"], url)
    assert result.returncode == 0, result.stderr
    assert _revision(url) == head_revision()
    again = _run([sys.executable, "-m", "app", "migrate"], url)
    assert again.returncode == 0, again.stderr


def test_alembic_upgrade_then_check_from_the_repository_root(tmp_path):
    url = f"sqlite:///{tmp_path / 'alembic.db'}"
    alembic = [sys.executable, "-m", "alembic"]
    upgrade = _run([*alembic, "upgrade", "head"], url)
    assert upgrade.returncode == 0, upgrade.stderr
    check = _run([*alembic, "check"], url)
    assert check.returncode == 0, check.stderr
    assert "No new upgrade operations detected" in check.stdout + check.stderr


def test_the_pipeline_without_its_extra_says_what_to_install(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a)
    )
    with pytest.raises(SystemExit) as stopped:
        main(["pipeline", "import", "x.csv"])
    assert "pip install 'hourglass[pipeline]'" in str(stopped.value)


def test_serve_with_workers_on_sqlite_is_refused_in_one_line(tmp_path):
    database = tmp_path / "one-writer.db"
    command = [sys.executable, "-m", "app", "serve", "--workers", "2", "--port", "1"]
    result = _run(command, f"sqlite:///{database}")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "--workers 2 needs PostgreSQL or MariaDB" in result.stderr
    assert "SQLite takes one writer at a time" in result.stderr
    assert not database.exists()  # refused before migrating


@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_serve_workers_must_be_a_positive_whole_number(tmp_path, workers):
    command = [sys.executable, "-m", "app", "serve", "--workers", workers]
    result = _run(command, f"sqlite:///{tmp_path / 'unused.db'}")
    assert result.returncode == 2
    assert "--workers" in result.stderr
