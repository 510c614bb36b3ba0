"""Health, readiness, metrics, and behaviour while the database is unreachable."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.storage.schema import head_revision

A_LOCK = "0b0e6c3e-7f39-4b0c-9a51-2f1d3c4e5a6b"
UNREACHABLE = {
    # Nothing listens on port 1; a directory that does not exist cannot hold a file.
    "postgresql": "postgresql://root@127.0.0.1:1/hourglass_test",
    "mariadb": "mariadb://root@127.0.0.1:1/hourglass_test",
    "sqlite": "sqlite:////nonexistent-directory/hourglass.db",
}


def test_healthz(client):
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


def test_readyz_when_the_schema_is_at_head(client):
    response = client.get("/readyz")
    assert response.status_code == 200
    assert response.json() == {"status": "ready", "schema_revision": head_revision()}


def test_metrics_are_prometheus_text(client):
    response = client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    assert 'hourglass_build_info{version="' in response.text


@pytest.fixture
def unreachable_client(database, clock):
    settings = Settings(database_url=UNREACHABLE[database.name], auto_migrate=False)
    with TestClient(create_app(settings, clock=clock)) as client:
        yield client


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("PUT", "/v1/queues/q/messages/k", {"payload": 1}),
        ("POST", "/v1/queues/q/messages/k", {"payload": 1}),
        ("POST", "/v1/queues/q/messages", {"payload": 1}),
        ("GET", "/v1/queues/q/messages/k", None),
        ("DELETE", "/v1/queues/q/messages/k", None),
        ("POST", "/v1/queues/q/batch", {"messages": [{"key": "k", "payload": 1}]}),
        ("POST", "/v1/queues/q/poll", {"wait": 1}),
        ("DELETE", f"/v1/queues/q/locks/{A_LOCK}", None),
        ("PATCH", f"/v1/queues/q/locks/{A_LOCK}", {"lease": 5}),
        ("POST", f"/v1/queues/q/locks/{A_LOCK}/release", None),
        ("GET", "/v1/queues", None),
        ("GET", "/v1/queues/q", None),
        ("DELETE", "/v1/queues/q?confirm=q", None),
    ],
)
def test_an_unreachable_database_is_503_with_retry_after(unreachable_client, method, path, body):
    response = unreachable_client.request(method, path, json=body)
    assert response.status_code == 503, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert int(response.headers["retry-after"]) >= 1
    assert response.json()["status"] == 503


def test_health_and_readiness_while_the_database_is_unreachable(unreachable_client):
    assert unreachable_client.get("/healthz").status_code == 200
    response = unreachable_client.get("/readyz")
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/problem+json"


def _statements(client) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith("hourglass_database_statements_total "):
            return float(line.split()[1])
    raise AssertionError("no hourglass_database_statements_total in /metrics")


def test_metrics_count_the_statements_sent_to_the_database(client):
    # The expiry sweep and the groups' keeper look by themselves, several times a second:
    # stopped, only the requests count.
    client.portal.call(client.app.state.expiry_sweeper.stop)
    client.portal.call(client.app.state.service.keeper.stop)
    before = _statements(client)
    client.post("/v1/queues/q/poll", json={"max": 1})
    after_one_poll = _statements(client)
    assert after_one_poll > before
    client.get("/healthz")  # touches no database
    assert _statements(client) == after_one_poll
