"""HOURGLASS_API_TOKENS: 401 without a valid token, 403 outside the token's queues, open health."""

from __future__ import annotations

import logging

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.storage.schema import upgrade_to_head

ADMIN, REPORTS, ORDERS = "s3cret-admin-token", "reports-only-token", "orders-only-token"


@pytest.fixture
def client(tmp_path):
    url = f"sqlite:///{tmp_path / 'auth.db'}"
    upgrade_to_head(url)
    settings = Settings(
        database_url=url,
        auto_migrate=False,
        api_tokens=f"{ADMIN}, {REPORTS}=reports-*, {ORDERS}=orders",
    )
    with TestClient(create_app(settings)) as client:
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _offer(client, queue: str, **headers):
    return client.put(f"/v1/queues/{queue}/messages/k", json={"payload": 1}, headers=headers)


@pytest.mark.parametrize(
    "headers",
    [
        {},
        _bearer("wrong"),
        _bearer(""),
        {"Authorization": f"Basic {ADMIN}"},
        {"Authorization": ADMIN},
    ],
)
def test_without_a_valid_token_v1_is_401_and_nothing_is_written(client, headers):
    response = _offer(client, "reports-daily", **headers)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert client.get("/v1/queues/reports-daily", headers=_bearer(ADMIN)).json()["messages"] == 0


def test_a_token_works_on_its_queues_and_is_403_elsewhere(client):
    assert _offer(client, "reports-daily", **_bearer(REPORTS)).status_code == 201
    forbidden = _offer(client, "billing", **_bearer(REPORTS))
    assert forbidden.status_code == 403
    assert forbidden.headers["content-type"].startswith("application/problem+json")
    assert _offer(client, "billing", **_bearer(ADMIN)).status_code == 201
    listed = client.get("/v1/queues", headers=_bearer(REPORTS)).json()["queues"]
    assert [queue["queue"] for queue in listed] == ["reports-daily"]
    everything = client.get("/v1/queues", headers=_bearer(ADMIN)).json()["queues"]
    assert [queue["queue"] for queue in everything] == ["billing", "reports-daily"]


def test_health_readiness_and_metrics_stay_open(client):
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    assert client.get("/metrics").status_code == 200


def test_tokens_are_never_logged(client, caplog):
    with caplog.at_level(logging.DEBUG):
        _offer(client, "reports-daily", **_bearer(REPORTS))
        _offer(client, "billing", **_bearer(REPORTS))
        _offer(client, "reports-daily", **_bearer("wrong-" + ADMIN))
    assert ADMIN not in caplog.text and REPORTS not in caplog.text


def test_an_empty_token_in_the_setting_is_refused():
    with pytest.raises(ValueError):
        create_app(Settings(database_url="sqlite://", api_tokens="=reports-*"))
