"""The console's fixtures: one headless Chromium for the run, and one `hourglass serve`
per database for the whole folder (SQLite, and PostgreSQL through a TCP proxy a test can
cut), with tokens on: every test gives one, as a person would."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.browser.pages import (
    ADMIN_TOKEN,
    NOBODYS_GLOB,
    NOBODYS_TOKEN,
    TEAM_GLOB,
    TEAM_TOKEN,
    Console,
    Service,
)
from tests.conftest import scratch_database
from tests.support.proxy import tcp_proxy
from tests.support.server import running_server

# The flags that work on this machine, and no name resolution beyond 127.0.0.1: a page
# that reached for a CDN or any other host would fail to load it (and the test with it).
CHROMIUM_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,800",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
# The page's own size, what the screenshots show.
VIEWPORT = {"width": 1280, "height": 800}

SERVER_ENVIRONMENT = {
    # Push targets the settings tests may name (nothing listens there: no queue of theirs
    # holds messages).
    "HOURGLASS_PUSH_ALLOWED": "http://127.0.0.1:9/hooks/",
    "HOURGLASS_API_TOKENS": (
        f"{ADMIN_TOKEN},{TEAM_TOKEN}={TEAM_GLOB},{NOBODYS_TOKEN}={NOBODYS_GLOB}"
    ),
    # Answer 503 soon once the database is gone, rather than after the default waits.
    "HOURGLASS_LOCK_TIMEOUT": "1",
    "HOURGLASS_STATEMENT_TIMEOUT": "2",
}


@pytest.fixture(scope="session")
def browser(chromium: tuple[str, str], tmp_path_factory: pytest.TempPathFactory):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service as DriverService

    binary, driver_binary = chromium
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium')}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=DriverService(driver_binary))
    driver.execute_cdp_cmd(
        "Emulation.setDeviceMetricsOverride", {**VIEWPORT, "deviceScaleFactor": 1, "mobile": False}
    )
    try:
        yield driver
    finally:
        driver.quit()


def _service(database: str, url: str, server_database_url: str, proxy=None) -> Iterator[Service]:
    with running_server(server_database_url, **SERVER_ENVIRONMENT) as server:
        headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as api:
            yield Service(database, server.url, url, proxy, api)


@pytest.fixture(scope="package")
def sqlite_service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    """`hourglass serve` on an SQLite file of its own, for every test of this folder."""
    url = f"sqlite:///{tmp_path_factory.mktemp('console') / 'hourglass.db'}"
    yield from _service("sqlite", url, url)


@pytest.fixture(scope="package")
def postgresql_service() -> Iterator[Service]:
    """`hourglass serve` on a PostgreSQL database of its own, reached through a proxy."""
    with scratch_database("postgresql", "console") as url:
        target = make_url(url)
        with tcp_proxy(target.host or "127.0.0.1", target.port or 5432) as proxy:
            through_proxy = target.set(host="127.0.0.1", port=proxy.port)
            yield from _service(
                "postgresql", url, through_proxy.render_as_string(hide_password=False), proxy
            )


@pytest.fixture(params=["sqlite", "postgresql"])
def service(request: pytest.FixtureRequest) -> Service:
    """Each database's server; a test names one with
    `@pytest.mark.parametrize("service", [name], indirect=True)`. The servers live for
    the whole folder, whichever tests use them in whatever order."""
    return request.getfixturevalue(f"{request.param}_service")


@pytest.fixture
def console(browser, service: Service) -> Iterator[Console]:
    """The console against `service`; fails the test on any error the browser logged
    that is the console's (its scripts, its files, an API call no test asked to fail)."""
    # An earlier test's page may still be polling a server that has since stopped (pytest
    # stops a folder's servers whenever a worker runs a test of another folder): leave it
    # before draining what it logged, so its refusals are not this test's.
    browser.get("about:blank")
    browser.get_log("browser")
    page = Console(browser, service)
    try:
        yield page
        problems = page.problems()
    finally:
        browser.get("about:blank")
    assert not problems, "the browser logged errors:\n" + "\n".join(problems)


@pytest.fixture
def unique() -> str:
    """A suffix for this test's queue names: the servers live across tests."""
    return uuid.uuid4().hex[:6]


@pytest.fixture(scope="session")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the screenshots go: HOURGLASS_SCREENSHOTS (e.g. docs/console), else a tmp dir."""
    folder = os.environ.get("HOURGLASS_SCREENSHOTS")
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path
