"""openapi.yaml at the top of the repository is the app's generated schema, exactly."""

from __future__ import annotations

from pathlib import Path

import yaml

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
