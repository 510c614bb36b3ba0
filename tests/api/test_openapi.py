"""openapi.yaml at the top of the repository is the app's generated schema, exactly; and
what it says of methods holds."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app

OPENAPI_FILE = Path(__file__).resolve().parents[2] / "openapi.yaml"


def test_openapi_yaml_matches_the_generated_schema():
    generated = create_app(Settings(database_url="sqlite://")).openapi()
    committed = yaml.safe_load(OPENAPI_FILE.read_text())
    assert committed == generated, "openapi.yaml is stale: run `hourglass openapi > openapi.yaml`"


def test_every_error_is_documented_as_problem_json():
    schema = create_app(Settings(database_url="sqlite://")).openapi()
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            for status, response in operation["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (
                        method,
                        path,
                        status,
                    )
            if path.startswith("/v1/"):
                assert "503" in operation["responses"], (method, path)


def test_a_method_a_path_does_not_have_is_405_naming_those_it_has():
    # Every answer 405 carries Allow (RFC 9110), listing every operation of the path, not
    # only the first route's (a message's GET and DELETE are routes of their own).
    settings = Settings(database_url="postgresql://root@127.0.0.1:1/none", auto_migrate=False)
    with TestClient(create_app(settings)) as client:
        paths = client.app.openapi()["paths"]
        for path in paths:
            url = re.sub(r"\{[^}]+\}", "x", path)
            # Every operation of each path that URL names: a cron entry's name may hold
            # slashes, so …/cron/x/pause is also the entry "x/pause".
            documented = {
                method.upper()
                for other, item in paths.items()
                if _names(other, url)
                for method in item
            }
            for method in {"OPTIONS", "PATCH", "PUT", "TRACE"} - documented:
                response = client.request(method, url)
                assert response.status_code == 405, (method, path)
                assert response.headers["content-type"] == "application/problem+json"
                allowed = set(response.headers["allow"].split(", "))
                # HEAD comes with GET where Starlette serves it (an implicit method).
                assert allowed - {"HEAD"} == documented, (method, path, allowed)


def _names(path: str, url: str) -> bool:
    """Whether the documented `path` matches `url`; a cron entry's `{name}` and a message's
    `{key}` are paths."""
    pattern = re.escape(path).replace(r"\{name\}", ".+").replace(r"\{key\}", ".+")
    pattern = re.sub(r"\\\{[^}]+\\\}", "[^/]+", pattern)
    return re.fullmatch(pattern, url) is not None
