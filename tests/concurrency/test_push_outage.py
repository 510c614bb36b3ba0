"""The database going away under the push dispatcher (PostgreSQL): its claims fail, are
counted and logged, and it pushes again by itself once the database is back; nothing is
lost."""

from __future__ import annotations

import threading

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.config import Settings
from app.main import create_app
from app.push.ports import PushResult
from tests.conftest import FakeClock, truncate_all
from tests.support.helpers import history_rows, put
from tests.support.proxy import tcp_proxy
from tests.support.push_endpoint import running_endpoint

pytestmark = pytest.mark.postgresql_only


class Recorded:
    """The dispatcher's events, passed on, with an event per kind of failure and result."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.seen: dict[str, threading.Event] = {}

    def _saw(self, what: str) -> None:
        self.seen.setdefault(what, threading.Event()).set()

    def wait(self, what: str, timeout: float) -> bool:
        return self.seen.setdefault(what, threading.Event()).wait(timeout)

    def pushed(self, queue: str, result: PushResult, seconds: float) -> None:
        self.inner.pushed(queue, result, seconds)
        self._saw(result.value)

    def error(self, kind: str) -> None:
        self.inner.error(kind)
        self._saw(kind)


def test_pushes_resume_by_themselves_after_an_outage(postgresql_url):
    truncate_all(postgresql_url)
    target = make_url(postgresql_url)
    clock = FakeClock()
    with (
        running_endpoint() as endpoint,
        tcp_proxy(target.host or "127.0.0.1", target.port or 5432) as proxy,
    ):
        through_proxy = target.set(host="127.0.0.1", port=proxy.port)
        settings = Settings(
            database_url=through_proxy.render_as_string(hide_password=False),
            auto_migrate=False,
            push_allowed=endpoint.prefix + "/",
            poll_recheck_seconds=0.05,
            lock_timeout=1,
        )
        with TestClient(create_app(settings, clock=clock)) as client:
            dispatcher = client.app.state.push_dispatcher  # type: ignore[attr-defined]
            recorded = dispatcher.events = Recorded(dispatcher.events)
            response = client.put("/v1/queues/q/settings", json={"push": {"url": endpoint.url()}})
            assert response.status_code == 200, response.text
            assert put(client, "q", "k", 1, delay=10).status_code == 201
            proxy.cut()
            clock.advance(10)  # due now, with the database gone
            assert recorded.wait("push_claim", 30), "no claim failed"
            assert endpoint.requests == []
            proxy.restore()
            assert recorded.wait("2xx", 30), "no push after the outage"
        assert [request.headers["hourglass-delivery"] for request in endpoint.requests] == ["1"]
    assert [(row["key"], row["outcome"]) for row in history_rows(postgresql_url)] == [
        ("k", "acknowledged")
    ]
