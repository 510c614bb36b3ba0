"""What every request passes through (app/api/edge.py): four layers around the router,
Hourglass's own in one, the bearer tokens outside it when configured."""

from __future__ import annotations

from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from fastapi.testclient import TestClient
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware

from app.api.auth import BearerTokens, MetricsTokens
from app.api.edge import RequestEdge
from app.config import Settings
from app.main import create_app


def _layers(settings: Settings) -> list[type]:
    app = create_app(settings)
    layer = app.build_middleware_stack()
    layers = []
    while layer is not app.router:
        layers.append(type(layer))
        layer = layer.app  # type: ignore[attr-defined]
    return layers


def test_four_layers_wrap_the_router(sqlite_url):
    assert _layers(Settings(database_url=sqlite_url, auto_migrate=False)) == [
        ServerErrorMiddleware,
        RequestEdge,
        ExceptionMiddleware,
        AsyncExitStackMiddleware,
    ]


def test_tokens_are_checked_outside_the_request_layer(sqlite_url):
    settings = Settings(
        database_url=sqlite_url, auto_migrate=False, api_tokens="a", metrics_tokens="m"
    )
    assert _layers(settings)[:3] == [ServerErrorMiddleware, BearerTokens, MetricsTokens]


def test_fastapis_own_telemetry_is_off(sqlite_url):
    app = create_app(Settings(database_url=sqlite_url, auto_migrate=False))
    # Off by configuration, not only for want of providers (an operator's global
    # OpenTelemetry set-up would otherwise switch it on for every request).
    assert not any(app._telemetry[part] for part in ("tracing", "metrics", "logs"))
    assert not app._native_telemetry.enabled()
    with TestClient(app) as client:
        answer = client.get("/healthz")
    assert answer.status_code == 200 and len(answer.headers["x-request-id"]) == 32
