"""Readiness follows the schema: an unmigrated database is not ready until migrated."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.main import create_app
from app.metrics.gauges import QUEUE_GAUGES_SECONDS
from app.storage.schema import head_revision, upgrade_to_head
from tests.conftest import FakeClock


def test_readyz_is_503_until_the_schema_is_migrated(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    with TestClient(create_app(Settings(database_url=url, auto_migrate=False))) as client:
        response = client.get("/readyz")
        assert response.status_code == 503
        assert "hourglass migrate" in response.json()["detail"]
        upgrade_to_head(url)
        assert client.get("/readyz").json() == {
            "status": "ready",
            "schema_revision": head_revision(),
        }


def test_requests_on_an_unmigrated_database_are_503(tmp_path):
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    with TestClient(create_app(Settings(database_url=url, auto_migrate=False))) as client:
        response = client.put("/v1/queues/q/messages/k", json={"payload": 1})
        assert response.status_code == 503
        assert response.headers["retry-after"]
        assert "hourglass migrate" in response.json()["detail"]
        assert client.get("/v1/queues").status_code == 503


def _ready_gauge(client: TestClient) -> float | None:
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "hourglass_ready":
                return sample.value
    return None


def test_the_ready_gauge_follows_readyz(tmp_path):
    # Prometheus cannot read /readyz: a replica that is up but not ready shows it here.
    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    clock = FakeClock()
    settings = Settings(database_url=url, auto_migrate=False)
    with TestClient(create_app(settings, clock=clock)) as client:
        assert client.get("/readyz").status_code == 503
        assert _ready_gauge(client) == 0
        upgrade_to_head(url)
        assert client.get("/readyz").status_code == 200
        clock.advance(QUEUE_GAUGES_SECONDS)  # the next scrape reads the database again
        assert _ready_gauge(client) == 1
