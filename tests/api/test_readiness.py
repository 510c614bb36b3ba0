"""Readiness follows the schema: an unmigrated database is not ready until migrated."""

from __future__ import annotations

from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.storage.schema import head_revision, upgrade_to_head


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
