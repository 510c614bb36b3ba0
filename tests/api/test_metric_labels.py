"""Made-up methods get no series of their own; the settings cache keeps its size."""

from __future__ import annotations

from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.main import create_app
from app.queue import settings as settings_module
from app.storage.schema import upgrade_to_head
from tests.conftest import FakeClock


def test_made_up_methods_are_labelled_other(tmp_path):
    url = f"sqlite:///{tmp_path / 'methods.db'}"
    upgrade_to_head(url)
    with TestClient(create_app(Settings(database_url=url, auto_migrate=False))) as client:
        for index in range(3):
            assert client.request(f"MADEUP{index}", "/v1/queues/q/poll").status_code == 405
            assert client.request(f"MADEUP{index}", "/nowhere").status_code == 404
        methods = {
            sample.labels["method"]
            for family in text_string_to_metric_families(client.get("/metrics").text)
            for sample in family.samples
            if sample.name.startswith("hourglass_http_request_duration_seconds")
        }
    assert methods == {"other"}  # /metrics itself is timed once it has answered


def test_the_settings_cache_keeps_the_latest_reads_when_full(tmp_path, monkeypatch):
    monkeypatch.setattr(settings_module, "_SETTINGS_CACHE_SIZE", 3)
    url = f"sqlite:///{tmp_path / 'cache.db'}"
    upgrade_to_head(url)
    app = create_app(Settings(database_url=url, auto_migrate=False), clock=FakeClock())
    with TestClient(app) as client:
        for index in range(5):  # none expires: the clock stands still
            assert client.post(f"/v1/queues/made-up-{index}/poll", json={}).status_code == 200
        assert list(app.state.service.settings.cache) == ["made-up-2", "made-up-3", "made-up-4"]
