"""The generated OpenAPI document, adjusted so errors are described as problem+json."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.auth import METRICS_PATH
from app.api.errors import PROBLEM_MEDIA_TYPE
from app.api.schemas.problems import Problem

_PROBLEM_REF = {"$ref": "#/components/schemas/Problem"}

# The W3C trace context headers an offer may carry (docs/guide/messages.md#trace-context):
# the hot routes read them from the request's headers themselves (a LeanRoute takes no
# header parameters), so the document names them here, once, for every offer's route.
_TRACE_PARAMETERS = {
    "traceparent": {
        "name": "traceparent",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "W3C trace context: stored with the message, returned by polls and "
        "reads, sent by push. One header, version-traceid-parentid-flags in lowercase hex; "
        "a malformed one (or more than one) is ignored, and so is `tracestate` then",
    },
    "tracestate": {
        "name": "tracestate",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
        "description": "W3C trace context: kept with a valid `traceparent` only; several "
        "are joined by `,`; at most 32 members and 512 characters, else ignored alone",
    },
}
# An offer route's `openapi_extra=`: the two headers as optional parameters.
TRACE_HEADERS: dict[str, Any] = {
    "parameters": [{"$ref": f"#/components/parameters/{name}"} for name in _TRACE_PARAMETERS]
}


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """The `responses=` entry documenting these error statuses of a route."""
    return {
        status: {"model": Problem, "description": HTTPStatus(status).phrase} for status in statuses
    }


def build_openapi(app: FastAPI) -> dict[str, Any]:
    """The app's schema with every 4xx/5xx as problem+json (FastAPI's default 422 replaced)."""
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
        license_info={"name": "Apache-2.0", "identifier": "Apache-2.0"},
        # Relative: the document is served by the service it describes, wherever that runs.
        servers=[{"url": "/", "description": "The service that serves this document"}],
    )
    schema.setdefault("components", {})["securitySchemes"] = {
        "bearer": {
            "type": "http",
            "scheme": "bearer",
            "description": "Required on /v1 when HOURGLASS_API_TOKENS is set, and on "
            "/metrics (one of its own tokens) when HOURGLASS_METRICS_TOKENS is set",
        }
    }
    for path, path_item in schema.get("paths", {}).items():
        for operation in path_item.values():
            if path.startswith("/v1/") or path == METRICS_PATH:
                # Optional ({}): tokens are required only when their setting is set.
                operation["security"] = [{}, {"bearer": []}]
                responses = operation.setdefault("responses", {})
                responses.setdefault("401", {"description": "No valid bearer token"})
                if path != METRICS_PATH:
                    responses.setdefault("403", {"description": "The token may not use this queue"})
            else:
                operation["security"] = []  # open: probes call it without a token
            if "requestBody" in operation:
                # The service's own bound on how long a body may take to arrive (app/server.py).
                operation.setdefault("responses", {}).setdefault(
                    "408", {"description": "The request's body did not arrive in time"}
                )
            for status, response in operation.get("responses", {}).items():
                if status.isdigit() and int(status) >= 400:
                    response["content"] = {PROBLEM_MEDIA_TYPE: {"schema": _PROBLEM_REF}}
    schema["components"]["parameters"] = _TRACE_PARAMETERS
    components = schema.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        components.pop(unused, None)
    return schema


def install_openapi(app: FastAPI) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
