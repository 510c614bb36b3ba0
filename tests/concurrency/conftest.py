"""The concurrency tests' real server: one `hourglass serve` per module on the database
under test (a module may override `server` with settings of its own), and its base URL
with the tables emptied before each test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.conftest import truncate_all
from tests.support.server import running_server


@pytest.fixture(scope="module")
def server(server_url: str) -> Iterator[str]:
    """A server with the default settings, for the module's tests."""
    with running_server(server_url) as running:
        yield running.url


@pytest.fixture
def base_url(server: str, server_url: str) -> str:
    """The module's server, its tables emptied first."""
    truncate_all(server_url)
    return server
