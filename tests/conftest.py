"""Shared fixtures: the databases every contract test runs on, a fake clock, clean tables.

HOURGLASS_TEST_DATABASES picks the databases (default `sqlite,postgresql`);
HOURGLASS_TEST_POSTGRESQL_URL says where PostgreSQL is. A database that is
asked for but does not answer fails the run: it is never skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import Settings, normalize_database_url
from app.main import create_app
from app.storage.engine import create_store
from app.storage.schema import upgrade_to_head
from app.storage.store import SqlStore
from app.storage.tables import metadata

DATABASES = [
    name.strip()
    for name in os.environ.get("HOURGLASS_TEST_DATABASES", "sqlite,postgresql").split(",")
    if name.strip()
]
POSTGRESQL_URL = normalize_database_url(
    os.environ.get(
        "HOURGLASS_TEST_POSTGRESQL_URL", "postgresql://root@127.0.0.1:5432/hourglass_test"
    )
)
_KNOWN = {"sqlite", "postgresql"}
if unknown := set(DATABASES) - _KNOWN:
    raise pytest.UsageError(f"HOURGLASS_TEST_DATABASES names unknown databases: {sorted(unknown)}")

# 2026-11-26T09:00:00.000Z: a Thursday morning, far from any epoch edge.
START_MS = 1_795_683_600_000


class FakeClock:
    """A clock that moves only when a test says so."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * 1000)


@dataclass(frozen=True)
class Database:
    name: str
    url: str

    def settings(self, **overrides: object) -> Settings:
        return Settings(database_url=self.url, auto_migrate=False, **overrides)


def _ensure_postgresql_database(url: str) -> None:
    """Create the test database if the server lacks it; fail loudly if there is no server."""
    target = make_url(url)
    maintenance = create_engine(target.set(database="postgres"), isolation_level="AUTOCOMMIT")
    try:
        with maintenance.connect() as connection:
            exists = connection.execute(
                text("SELECT 1 FROM pg_database WHERE datname = :name"), {"name": target.database}
            ).scalar()
            if not exists:
                connection.execute(text(f'CREATE DATABASE "{target.database}"'))
    except Exception as error:
        pytest.fail(
            f"PostgreSQL is not answering at {target.render_as_string(hide_password=True)}: {error}\n"
            "Start it, point HOURGLASS_TEST_POSTGRESQL_URL at one, or run only SQLite with "
            "HOURGLASS_TEST_DATABASES=sqlite.",
            pytrace=False,
        )
    finally:
        maintenance.dispose()


@pytest.fixture(scope="session")
def postgresql_url() -> str:
    """A migrated PostgreSQL database; fails (never skips) when the server is missing."""
    if "postgresql" not in DATABASES:
        pytest.skip("PostgreSQL left out by HOURGLASS_TEST_DATABASES")
    _ensure_postgresql_database(POSTGRESQL_URL)
    upgrade_to_head(POSTGRESQL_URL)
    return POSTGRESQL_URL


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    path: Path = tmp_path_factory.mktemp("sqlite") / "hourglass.db"
    url = f"sqlite:///{path}"
    upgrade_to_head(url)
    return url


@pytest.fixture(scope="session", params=DATABASES)
def database(request: pytest.FixtureRequest) -> Database:
    """Each database the contract suite runs on, migrated to head."""
    url = request.getfixturevalue(f"{request.param}_url")
    return Database(request.param, url)


def truncate_all(url: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for table in reversed(metadata.sorted_tables):
                connection.execute(table.delete())
    finally:
        engine.dispose()


@pytest.fixture
def clean_database(database: Database) -> Database:
    """The database with empty tables."""
    truncate_all(database.url)
    return database


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clean_database: Database) -> Iterator[SqlStore]:
    store = create_store(clean_database.settings())
    yield store
    store.engine.dispose()


@pytest.fixture
def settings(clean_database: Database) -> Settings:
    return clean_database.settings()


@pytest.fixture
def client(settings: Settings, clock: FakeClock) -> Iterator[TestClient]:
    """The app over HTTP (in process), on a clean database, with the fake clock."""
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client
