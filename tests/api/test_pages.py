"""Every page of the service (every answer a browser renders as HTML) carries the pages'
Content-Security-Policy and `nosniff`, whichever route or file gives it; every other
answer `nosniff` (app/api/edge.py, app/console/policy.py)."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest
from fastapi.responses import HTMLResponse
from fastapi.routing import iter_route_contexts
from fastapi.testclient import TestClient
from starlette.routing import Mount

from app.api.edge import is_page
from app.console.policy import CONTENT_SECURITY_POLICY, PAGE_HEADERS, redoc_policy
from app.console.routes import STATIC_URL
from app.main import create_app

# Any value will do for a path's parameters: the walk asks for every route's answer.
_PARAMETER = re.compile(r"\{[^}]+\}")
_NONCE = re.compile(r"'nonce-([A-Za-z0-9_-]+)'")


def _static_files() -> list[str]:
    """Every file the console's static folder serves, as a path under it."""
    root = files("app.console").joinpath("static")
    found, folders = [], [(root, "")]
    while folders:
        folder, prefix = folders.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                folders.append((entry, f"{prefix}{entry.name}/"))
            else:
                found.append(f"{prefix}{entry.name}")
    return sorted(found)


def _every_get(app) -> list[str]:
    """A path for every GET route of `app` (those of its included routers too), and for
    every file of its mount."""
    paths = []
    for route in iter_route_contexts(app.routes):
        if isinstance(route.original_route, Mount):
            assert route.path == STATIC_URL, route.path  # the one mount, the console's files
            paths += [f"{route.path}/{name}" for name in _static_files()]
        elif "GET" in (route.methods or ()):
            paths.append(_PARAMETER.sub("x", route.path))
    return paths


def _policy_expected(path: str, policy: str) -> str:
    """The pages' policy; /redoc's is relaxed for its styles, with a nonce of its own."""
    if path != "/redoc":
        return CONTENT_SECURITY_POLICY
    nonces = _NONCE.findall(policy)
    assert len(nonces) == 1, policy
    return redoc_policy(nonces[0])


def _assert_a_page(path: str, response) -> None:
    headers = response.headers
    (policy,) = headers.get_list("content-security-policy")
    assert policy == _policy_expected(path, policy), path
    assert "'unsafe-inline'" not in policy and "'unsafe-eval'" not in policy, path
    assert re.search(r"(^|; )script-src 'self'(;|$)", policy), path
    assert headers.get_list("x-content-type-options") == ["nosniff"], path
    assert headers.get_list("referrer-policy") == [PAGE_HEADERS["Referrer-Policy"]], path
    # No script of the page's own: inline ones would not run, and must not be needed.
    assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", response.text), path
    assert not re.search(r"\son[a-z]+=", response.text), path


def test_every_page_of_every_route_and_file_carries_the_policy_and_nosniff(client):
    pages = set()
    for path in _every_get(client.app):
        response = client.get(path, follow_redirects=False)
        assert response.status_code < 500, (path, response.text)
        assert response.headers.get_list("x-content-type-options") == ["nosniff"], path
        content_type = response.headers.get("content-type", "")
        if content_type.startswith("text/html"):
            _assert_a_page(path, response)
            pages.add(path)
        elif content_type.startswith("image/svg+xml"):  # a page too, when opened alone
            assert response.headers.get_list("content-security-policy") == [
                CONTENT_SECURITY_POLICY
            ], path
    # The walk did find the pages (the console's, at any of its addresses, and the docs).
    assert {"/console/", "/console/x", "/docs", "/redoc"} <= pages


def test_the_console_is_not_served_from_its_static_folder(client):
    for path in ("/console/static/index.html", "/console/static/console.html"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"] == "application/problem+json"
    assert not [name for name in _static_files() if name.endswith((".html", ".htm"))]


def test_a_page_from_any_route_gets_the_headers_and_keeps_its_own_policy(settings):
    app = create_app(settings)

    async def bare() -> HTMLResponse:
        return HTMLResponse("<p>a page that forgot its headers</p>")

    async def own_policy() -> HTMLResponse:
        return HTMLResponse("<p>", headers={"Content-Security-Policy": "default-src 'none'"})

    app.add_api_route("/bare", bare)
    app.add_api_route("/own-policy", own_policy)
    with TestClient(app) as client:
        bare_page = client.get("/bare")
        assert bare_page.headers.get_list("content-security-policy") == [CONTENT_SECURITY_POLICY]
        assert bare_page.headers.get_list("x-content-type-options") == ["nosniff"]
        own = client.get("/own-policy")
        assert own.headers.get_list("content-security-policy") == ["default-src 'none'"]
        assert own.headers.get_list("referrer-policy") == ["same-origin"]


@pytest.mark.parametrize("path", ["/healthz", "/openapi.json", "/v1/queues"])
def test_answers_that_are_no_page_carry_no_policy(client, path):
    response = client.get(path)
    assert response.headers.get_list("x-content-type-options") == ["nosniff"]
    assert "content-security-policy" not in response.headers


@pytest.mark.parametrize(
    "content_type",
    ["text/html; charset=utf-8", "image/svg+xml", "application/xhtml+xml", "text/xml"],
)
def test_any_document_that_may_run_script_is_a_page(content_type):
    assert is_page([(b"content-type", content_type.encode())])


@pytest.mark.parametrize("content_type", ["application/json", "application/problem+json", ""])
def test_data_is_no_page(content_type):
    assert not is_page([(b"content-type", content_type.encode())])
