"""A real `hourglass serve` told to stop (SIGTERM) while pushes are in flight (PostgreSQL,
MariaDB): it claims nothing more, gives the requests their grace, then releases their
messages due at once; nothing is lost and nothing is left leased."""

from __future__ import annotations

import time

import httpx
import pytest

from app.push.dispatcher import STOP_GRACE_SECONDS
from tests.conftest import truncate_all
from tests.support.helpers import history_rows, stored_rows
from tests.support.push_endpoint import Answer, running_endpoint
from tests.support.server import running_server

pytestmark = pytest.mark.server_databases


def test_a_stopped_server_releases_what_it_was_pushing(server_url):
    truncate_all(server_url)
    with running_endpoint() as endpoint:
        endpoint.answer = lambda received: Answer(hold=received.path == "/slow")
        environment = {"HOURGLASS_PUSH_ALLOWED": endpoint.prefix + "/"}
        with running_server(server_url, **environment) as server:
            with httpx.Client(base_url=server.url, timeout=10) as client:
                for queue, path in (("slow", "/slow"), ("fast", "/fast")):
                    response = client.put(
                        f"/v1/queues/{queue}/settings",
                        json={"push": {"url": endpoint.url(path), "timeout": 60, "concurrency": 2}},
                    )
                    assert response.status_code == 200, response.text
                for key in ("s1", "s2", "s3"):
                    client.put(f"/v1/queues/slow/messages/{key}", json={"payload": key})
                client.put("/v1/queues/fast/messages/f1", json={"payload": "f1"})
                endpoint.wait_until(lambda e: e.in_flight == 2 and e.finished == 1)
            stopped_at = time.time()
        # The context above sent SIGTERM and waited for the process to end.
        took = time.time() - stopped_at
        lines = "".join(server.output)
        assert "Traceback" not in lines, lines
    rows = stored_rows(server_url)
    assert sorted(row["pKey"] for row in rows) == ["s1", "s2", "s3"]
    assert all(row["lockUuid"] is None for row in rows), rows
    # The two in flight were released due at once (not after their 65 s lease).
    assert all(row["scheduledAt"] <= time.time() * 1000 for row in rows), rows
    assert [(row["queue"], row["outcome"]) for row in history_rows(server_url)] == [
        ("fast", "acknowledged")
    ]
    assert len(endpoint.requests) == 3  # the third was never claimed
    assert STOP_GRACE_SECONDS - 1 <= took < STOP_GRACE_SECONDS + 10
