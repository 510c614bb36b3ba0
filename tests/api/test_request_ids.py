"""Every answer carries X-Request-ID, and log lines written for the request carry it too."""

from __future__ import annotations

import json
import logging

import pytest
from fastapi.testclient import TestClient

from app.api.edge import current_request_id
from app.config import Settings
from app.logs import JsonLines, RequestIdFilter
from app.main import create_app


@pytest.fixture
def client():
    # An unreachable database: requests answer 503 and log a warning, with no set-up.
    settings = Settings(database_url="postgresql://root@127.0.0.1:1/none", auto_migrate=False)
    with TestClient(create_app(settings)) as client:
        yield client


def test_a_request_id_is_made_or_kept(client):
    made = client.get("/healthz").headers["x-request-id"]
    assert len(made) == 32
    assert client.get("/healthz").headers["x-request-id"] != made
    kept = client.get("/healthz", headers={"X-Request-ID": "checkout-7f3a"})
    assert kept.headers["x-request-id"] == "checkout-7f3a"
    refused = client.get("/healthz", headers={"X-Request-ID": "has spaces\tand tabs"})
    assert refused.headers["x-request-id"] != "has spaces\tand tabs"


def test_log_lines_written_during_a_request_carry_its_id(client, caplog):
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.WARNING, logger="app.api.errors"):
        response = client.put(
            "/v1/queues/q/messages/k", json={"payload": 1}, headers={"X-Request-ID": "req-123"}
        )
    assert response.status_code == 503
    assert [record.request_id for record in caplog.records] == ["req-123"]


def test_json_lines_have_the_fields_a_log_pipeline_needs():
    record = logging.LogRecord("app.x", logging.WARNING, __file__, 1, "disk %s", ("full",), None)
    token = current_request_id.set("req-9")
    try:
        RequestIdFilter().filter(record)
    finally:
        current_request_id.reset(token)
    line = json.loads(JsonLines().format(record))
    assert line["level"] == "WARNING" and line["logger"] == "app.x"
    assert line["message"] == "disk full" and line["request_id"] == "req-9"
    assert line["time"].endswith("+00:00")
