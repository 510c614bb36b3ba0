"""Shared fixtures: the databases every contract test runs on, a fake clock, clean tables.

HOURGLASS_TEST_DATABASES names the databases to require (.ci/run names all three):
one that is asked for but does not answer fails the run. Unset, the run takes
SQLite and every server that answers, and says loudly, in its header and its
summary, which it did not exercise. HOURGLASS_TEST_POSTGRESQL_URL and
HOURGLASS_TEST_MARIADB_URL say which servers to use (their database name is the
prefix of the databases each run creates for itself and drops at the end).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.config import Settings, normalize_database_url
from app.main import create_app
from app.storage.blocking import BlockingStorage, create_blocking_storage
from app.storage.schema import upgrade_to_head
from app.storage.tables import metadata

POSTGRESQL_URL = normalize_database_url(
    os.environ.get(
        "HOURGLASS_TEST_POSTGRESQL_URL", "postgresql://root@127.0.0.1:5432/hourglass_test"
    )
)
MARIADB_URL = normalize_database_url(
    os.environ.get("HOURGLASS_TEST_MARIADB_URL", "mariadb://root@127.0.0.1:3306/hourglass_test")
)
SERVER_URLS = {"postgresql": POSTGRESQL_URL, "mariadb": MARIADB_URL}
_ASKED_FOR = os.environ.get("HOURGLASS_TEST_DATABASES")
# How long the default run waits for a server to answer before leaving it out.
_PROBE_TIMEOUT_SECONDS = 3


def _server_problem(server: str) -> str | None:
    """Why `server` cannot be used by this run, or None when it answers."""
    target = make_url(SERVER_URLS[server])
    maintenance = "postgres" if server == "postgresql" else "mysql"
    timeout = {"connect_timeout": _PROBE_TIMEOUT_SECONDS}
    try:
        engine = create_engine(target.set(database=maintenance), connect_args=timeout)
    except ImportError as error:  # the driver is not installed
        return f"its driver is missing ({error})"
    try:
        with engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:  # noqa: BLE001 - any failure means "not answering"
        first_line = str(getattr(error, "orig", error)).strip().splitlines()[0:1]
        return f"not answering at {target.render_as_string()} ({''.join(first_line)})"
    finally:
        engine.dispose()
    return None


if _ASKED_FOR is not None:
    # Asked for by name (as .ci/run does): each one must answer, or the run fails.
    DATABASES = [name.strip() for name in _ASKED_FOR.split(",") if name.strip()]
    LEFT_OUT: dict[str, str] = {}
else:
    # A newcomer's default: SQLite, and every server that answers; the others are
    # named at the start and in the summary of the run, never left out quietly.
    LEFT_OUT = {
        server: problem
        for server in SERVER_URLS
        if (problem := _server_problem(server)) is not None
    }
    DATABASES = ["sqlite", *(server for server in SERVER_URLS if server not in LEFT_OUT)]
# The databases with a server process: several connections, row locks, restarts.
SERVERS = [name for name in DATABASES if name in SERVER_URLS]
_KNOWN = {"sqlite", *SERVER_URLS}
if unknown := set(DATABASES) - _KNOWN:
    raise pytest.UsageError(f"HOURGLASS_TEST_DATABASES names unknown databases: {sorted(unknown)}")


# What a default run could not exercise besides database servers (the Spark
# pipeline without Java): filled in as the run finds out, shown in its summary.
ALSO_NOT_EXERCISED: dict[str, str] = {}


def required_or_skip(what: str, problem: str) -> None:
    """`what` cannot run here because of `problem`: fail where the run requires
    everything (HOURGLASS_TEST_DATABASES set, as in CI), else skip it loudly."""
    if _ASKED_FOR is not None:
        pytest.fail(f"{what}: {problem}", pytrace=False)
    ALSO_NOT_EXERCISED[what] = problem
    pytest.skip(f"{what} not exercised: {problem}")


@pytest.fixture(scope="session")
def java() -> None:
    """Spark needs Java: without one the pipeline is not exercised (and CI fails)."""
    if shutil.which("java") is None:
        required_or_skip("the Spark pipeline", "no `java` on PATH (Spark needs Java 17)")


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    """Chromium and its driver, for tests/browser: without them (or without selenium) the
    console is not exercised in a browser (and CI fails)."""
    browser = shutil.which("chromium")
    driver = shutil.which("chromedriver")
    if browser is None or driver is None:
        missing = " and ".join(
            name for name, path in (("chromium", browser), ("chromedriver", driver)) if not path
        )
        required_or_skip(
            "the console in a browser",
            f"no {missing} on PATH (Debian: apt-get install chromium chromium-driver)",
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        required_or_skip("the console in a browser", "selenium is missing (pip install '.[test]')")
    return browser, driver


def _not_exercised() -> list[str]:
    return [
        *(
            f"{server}: {LEFT_OUT.get(server, 'left out by HOURGLASS_TEST_DATABASES')}"
            for server in SERVER_URLS
            if server not in DATABASES
        ),
        *(f"{what}: {problem}" for what, problem in ALSO_NOT_EXERCISED.items()),
    ]


# Modules that take minutes (Spark's JVMs on a cluster of their own): scheduled first.
# xdist's loadscope hands each module whole to a worker, in collection order, so one
# collected last would run alone at the end, after every other test had finished.
LONGEST_FIRST = ("tests/pipeline/test_cluster.py",)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in LONGEST_FIRST)


def pytest_report_header() -> list[str]:
    lines = [f"hourglass databases: {', '.join(DATABASES)}"]
    if missing := _not_exercised():
        lines.append("!!! NOT EXERCISED (their tests are skipped):")
        lines.extend(f"!!!   {line}" for line in missing)
        if _ASKED_FOR is None:
            lines.append(
                "!!!   start them, or set HOURGLASS_TEST_DATABASES=sqlite,postgresql,mariadb "
                "to require them"
            )
    return lines


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    # Under xdist a skip happens in a worker: the process that prints the summary
    # learns what was not exercised from the skip's report.
    if report.skipped and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2]).removeprefix("Skipped: ")
        what, found, problem = message.partition(" not exercised: ")
        if found:
            ALSO_NOT_EXERCISED.setdefault(what, problem)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if missing := _not_exercised():
        terminalreporter.section("NOT exercised by this run", sep="!", red=True, bold=True)
        for line in missing:
            terminalreporter.line(line, red=True)


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


def _admin(url: str):
    """An autocommit engine on the server, outside any of our databases; fails (never
    skips) without a server."""
    target = make_url(url)
    backend = target.get_backend_name()
    maintenance = "postgres" if backend == "postgresql" else "mysql"
    admin = create_engine(target.set(database=maintenance), isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            connection.execute(text("SELECT 1"))
    except Exception as error:  # noqa: BLE001 - whatever it is, the run must fail loudly
        admin.dispose()
        variable = f"HOURGLASS_TEST_{'POSTGRESQL' if backend == 'postgresql' else 'MARIADB'}_URL"
        pytest.fail(
            f"{backend} is not answering at {target.render_as_string(hide_password=True)}: "
            f"{error}\nStart it, point {variable} at one, or leave it out of "
            "HOURGLASS_TEST_DATABASES (for instance HOURGLASS_TEST_DATABASES=sqlite).",
            pytrace=False,
        )
    return admin


@contextmanager
def scratch_database(server: str, purpose: str, options: str = "") -> Iterator[str]:
    """A new, empty database on the test server `server` ("postgresql" or "mariadb"),
    made with CREATE DATABASE's `options` and dropped afterwards.

    Every test run gets its own databases, so runs on one machine never meet. A
    server this run does not exercise (see the top of this file) skips the test (the
    one place a test skips); one asked for that does not answer fails it.
    """
    if server not in DATABASES:
        pytest.skip(f"{server} not exercised by this run: {LEFT_OUT.get(server, 'left out')}")
    base = make_url(SERVER_URLS[server])
    name = f"{base.database}_{purpose}_{uuid.uuid4().hex[:8]}"
    admin = _admin(SERVER_URLS[server])
    quoted = admin.dialect.identifier_preparer.quote_identifier(name)
    try:
        with admin.connect() as connection:
            connection.execute(text(f"CREATE DATABASE {quoted} {options}".rstrip()))
        try:
            yield base.set(database=name).render_as_string(hide_password=False)
        finally:
            force = " WITH (FORCE)" if server == "postgresql" else ""
            with admin.connect() as connection:
                connection.execute(text(f"DROP DATABASE IF EXISTS {quoted}{force}"))
    finally:
        admin.dispose()


def _server_url(server: str) -> Iterator[str]:
    with scratch_database(server, "run") as url:
        upgrade_to_head(url)
        yield url


@pytest.fixture(scope="session")
def postgresql_url() -> Iterator[str]:
    """A migrated PostgreSQL database of this run's own; fails (never skips) without a server."""
    yield from _server_url("postgresql")


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    """A migrated MariaDB database of this run's own; fails (never skips) without a server."""
    yield from _server_url("mariadb")


@pytest.fixture(scope="session", params=SERVERS)
def server_url(request: pytest.FixtureRequest) -> str:
    """Each database with a server process, for the concurrency tests."""
    return request.getfixturevalue(f"{request.param}_url")


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


@pytest.fixture(params=["chunks", "bulk"])
def batch_insert_path(request: pytest.FixtureRequest, database: Database, monkeypatch) -> str:
    """Which way a batch offer inserts its new keys: the chunked INSERTs of offer_many, or
    offer_bulk's bulk path (COPY into a staging table, then one INSERT … SELECT), where
    the database has one. With "bulk" every batch offer of the test, over HTTP or
    straight to the store, goes through the bulk path, so its outcomes, rows and counts
    are held to the batch offer's tests."""
    from app.storage.dialects import for_engine_url
    from app.storage.offers import Offers

    if request.param == "bulk":
        if for_engine_url(database.url).bulk_rows is None:
            pytest.skip(f"{database.name} has no bulk path: offer_bulk is offer_many there")
        monkeypatch.setattr(Offers, "_insert_in_chunks", Offers._insert_in_bulk)
    return request.param


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clean_database: Database) -> Iterator[BlockingStorage]:
    store = create_blocking_storage(clean_database.settings())
    yield store
    store.close()


@pytest.fixture
def settings(clean_database: Database) -> Settings:
    return clean_database.settings()


@pytest.fixture
def client(settings: Settings, clock: FakeClock) -> Iterator[TestClient]:
    """The app over HTTP (in process), on a clean database, with the fake clock."""
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client
