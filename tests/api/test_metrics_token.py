"""HOURGLASS_METRICS_TOKENS: /metrics only with one of its own tokens; open without the setting."""

from __future__ import annotations

import hmac
import logging

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from app.storage.schema import upgrade_to_head

SCRAPER, NEXT_SCRAPER, ADMIN = "scraper-token", "next-scraper-token", "s3cret-admin-token"


def _app(tmp_path, **settings: str):
    url = f"sqlite:///{tmp_path / 'metrics.db'}"
    upgrade_to_head(url)
    return create_app(Settings(database_url=url, auto_migrate=False, **settings))


@pytest.fixture
def client(tmp_path):
    app = _app(tmp_path, metrics_tokens=f"{SCRAPER}, {NEXT_SCRAPER}", api_tokens=ADMIN)
    with TestClient(app) as client:
        yield client


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize(
    "headers",
    [
        {},
        _bearer("wrong"),
        _bearer(""),
        _bearer(ADMIN),  # a /v1 token opens /v1 only
        _bearer(SCRAPER[:-1]),
        _bearer(SCRAPER + "x"),
        {"Authorization": f"Basic {SCRAPER}"},
        {"Authorization": SCRAPER},
    ],
)
def test_metrics_without_one_of_its_tokens_is_401(client, headers):
    response = client.get("/metrics", headers=headers)
    assert response.status_code == 401
    assert response.headers["content-type"].startswith("application/problem+json")
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert "hourglass_" not in response.text


@pytest.mark.parametrize("token", [SCRAPER, NEXT_SCRAPER])
def test_metrics_with_one_of_its_tokens(client, token):
    response = client.get("/metrics", headers=_bearer(token))
    assert response.status_code == 200
    assert "hourglass_build_info" in response.text


def test_a_metrics_token_opens_nothing_else(client):
    assert client.get("/v1/queues", headers=_bearer(SCRAPER)).status_code == 401
    assert client.get("/v1/queues", headers=_bearer(ADMIN)).status_code == 200
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200


def test_metrics_stay_open_without_the_setting_with_a_warning_when_v1_has_tokens(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="app.main"):
        app = _app(tmp_path, api_tokens=ADMIN)
    assert "HOURGLASS_METRICS_TOKENS" in caplog.text
    with TestClient(app) as client:
        assert client.get("/metrics").status_code == 200
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="app.main"):
        _app(tmp_path, api_tokens=ADMIN, metrics_tokens=SCRAPER)
        _app(tmp_path)
    assert "HOURGLASS_METRICS_TOKENS" not in caplog.text


def test_metrics_tokens_are_compared_in_constant_time(client, monkeypatch):
    compared: list[tuple[bytes, bytes]] = []
    compare_digest = hmac.compare_digest

    def recording(expected: bytes, offered: bytes) -> bool:
        compared.append((expected, offered))
        return compare_digest(expected, offered)

    monkeypatch.setattr(hmac, "compare_digest", recording)
    for offered in ("wrong", SCRAPER):
        compared.clear()
        client.get("/metrics", headers=_bearer(offered))
        # Every token, through hmac.compare_digest, whichever matches.
        assert compared == [
            (SCRAPER.encode(), offered.encode()),
            (NEXT_SCRAPER.encode(), offered.encode()),
        ]


def test_metrics_tokens_are_never_logged(client, caplog):
    with caplog.at_level(logging.DEBUG):
        client.get("/metrics", headers=_bearer(SCRAPER))
        client.get("/metrics", headers=_bearer("wrong-" + NEXT_SCRAPER))
    assert SCRAPER not in caplog.text


def test_a_setting_without_a_token_is_refused():
    with pytest.raises(ValueError):
        create_app(Settings(database_url="sqlite://", metrics_tokens=" , "))
