"""Every error a client can see, rendered as application/problem+json (RFC 9457)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount

from app.domain import errors
from app.domain.formats import RFC3339_PATTERN
from app.domain.schedule import CRON_EXPRESSION_PATTERN

logger = logging.getLogger(__name__)

PROBLEM_MEDIA_TYPE = "application/problem+json"
# Seconds a client should wait before retrying while the database is unavailable.
RETRY_AFTER_SECONDS = 1

# Domain error -> (status, problem type slug).
_DOMAIN_ERRORS: dict[type[errors.HourglassError], tuple[int, str]] = {
    errors.MessageNotFound: (404, "message-not-found"),
    errors.LockNotFound: (404, "lock-not-found"),
    errors.CronEntryNotFound: (404, "cron-entry-not-found"),
    errors.CronEntryTooLarge: (422, "cron-entry-too-large"),
    errors.InvalidPayload: (422, "invalid-payload"),
    errors.PayloadTooDeep: (422, "payload-too-deep"),
    errors.PayloadTooLarge: (413, "payload-too-large"),
    errors.PurgeNotConfirmed: (400, "purge-not-confirmed"),
    errors.InvalidSettings: (422, "invalid-settings"),
    errors.CursorNotFound: (404, "cursor-not-found"),
    errors.QueueForbidden: (403, "forbidden"),
    errors.StorageUnavailable: (503, "database-unavailable"),
}


class ProblemResponse(JSONResponse):
    media_type = PROBLEM_MEDIA_TYPE


class ProblemError(HTTPException):
    """An HTTPException that names its problem type.

    Raised from inside a body read (the request's `receive`), where FastAPI lets only
    an HTTPException through (it turns any other error into a 400).
    """

    def __init__(
        self, status: int, detail: str, *, slug: str, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(status, detail, headers)
        self.slug = slug


def problem(
    status: int,
    detail: str,
    *,
    slug: str | None = None,
    headers: Mapping[str, str] | None = None,
    **extra: Any,
) -> ProblemResponse:
    """A problem+json response; `slug` names the problem type (default: the status's name)."""
    phrase = HTTPStatus(status).phrase
    slug = slug or phrase.lower().replace(" ", "-")
    body = {
        "type": f"urn:hourglass:problem:{slug}",
        "title": phrase,
        "status": status,
        "detail": detail,
    }
    return ProblemResponse(body | extra, status_code=status, headers=headers)


def unavailable(detail: str) -> ProblemResponse:
    """503 with Retry-After: the database cannot serve now."""
    return problem(
        503,
        detail,
        slug="database-unavailable",
        headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
    )


def domain_problem(error: errors.HourglassError) -> ProblemResponse:
    """The answer to a domain error: its status, problem type and message."""
    status, slug = next(
        (_DOMAIN_ERRORS[kind] for kind in type(error).__mro__ if kind in _DOMAIN_ERRORS),
        (500, "internal-error"),
    )
    if status == 503:
        return unavailable(str(error))
    return problem(status, str(error), slug=slug)


async def _domain_error(request: Request, error: Exception) -> ProblemResponse:
    assert isinstance(error, errors.HourglassError)
    if isinstance(error, errors.StorageUnavailable):
        # The detail is ours; the driver's words (hosts, users) go to the log only.
        logger.warning("%s (%s)", error, error.__cause__)
        if metrics := getattr(request.app.state, "metrics", None):
            metrics.error("database_unavailable")
    return domain_problem(error)


# Patterns too long to read in an error (they say in full what openapi.yaml allows),
# and what they stand for.
_PATTERN_WORDS = {
    RFC3339_PATTERN: "an RFC 3339 time with seconds and a zone (Z or an offset), "
    "in years 0001-9999 also in UTC, e.g. 2026-11-26T09:00:00Z",
    CRON_EXPRESSION_PATTERN: "a 5-field cron expression (minute hour day month weekday, "
    "each in its range), e.g. 0 2 * * 1-5",
}


def _message(item: Mapping[str, Any]) -> str:
    pattern = (item.get("ctx") or {}).get("pattern")
    if item["type"] == "string_pattern_mismatch" and pattern in _PATTERN_WORDS:
        return f"should be {_PATTERN_WORDS[pattern]}"
    return str(item["msg"])


async def _validation_error(_request: Request, error: Exception) -> ProblemResponse:
    assert isinstance(error, RequestValidationError)
    details = [
        {"loc": list(item["loc"]), "msg": _message(item), "type": item["type"]}
        for item in error.errors()
    ]
    summary = "; ".join(f"{'.'.join(map(str, item['loc']))}: {item['msg']}" for item in details)
    return problem(
        422, summary or "invalid request", slug="invalid-request", errors=jsonable_encoder(details)
    )


async def _http_error(request: Request, error: Exception) -> ProblemResponse:
    assert isinstance(error, HTTPException)
    if error.status_code == 400 and error.__cause__ is not None:
        # FastAPI's answer when the JSON parser itself gives up (nesting too deep,
        # an integer too long to convert): the body is invalid input like any other.
        return problem(
            422, "the request body is not JSON this service can read", slug="invalid-request"
        )
    if error.status_code == 405 and (allow := _allow(request)):
        # Starlette's Allow names the methods of the first route whose path matched;
        # a path is often served by several (GET and DELETE of a message are two routes).
        return problem_from(error, headers={**(error.headers or {}), "Allow": allow})
    return problem_from(error)


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _allow(request: Request) -> str:
    """Every method a route of the app serves at the request's path, for a 405's Allow
    (empty when only a mount serves it: a mount answers its own 405s)."""
    # Each method is tried as the router would try it: FastAPI nests the routes of an
    # included router in one route of the app, whose match speaks for all of them.
    routes = [route for route in request.app.router.routes if not isinstance(route, Mount)]
    return ", ".join(
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] is Match.FULL for route in routes
        )
    )


def problem_from(error: HTTPException, headers: Mapping[str, str] | None = None) -> ProblemResponse:
    """The problem+json answer for `error` (of its own type when it is a ProblemError);
    `headers` in place of its own."""
    detail = error.detail if isinstance(error.detail, str) else HTTPStatus(error.status_code).phrase
    return problem(
        error.status_code,
        detail,
        slug=getattr(error, "slug", None),
        headers=error.headers if headers is None else headers,
    )


async def _unexpected_error(_request: Request, error: Exception) -> ProblemResponse:
    logger.exception("unexpected error", exc_info=error)
    return problem(500, "an unexpected error occurred; it has been logged", slug="internal-error")


def install_error_handlers(app: FastAPI) -> None:
    """Render every error the app can raise as problem+json."""
    for error_type in _DOMAIN_ERRORS:
        app.add_exception_handler(error_type, _domain_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(HTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
