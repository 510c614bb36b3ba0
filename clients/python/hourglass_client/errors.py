"""Errors: every problem+json answer becomes an exception carrying its fields."""

from __future__ import annotations

from typing import Any

import httpx


class HourglassError(Exception):
    """An answer that was not a success, with the fields of its problem+json body.

    `type`, `title`, `status` and `detail` are RFC 9457's; `problem` is the whole body
    as sent (a `422` adds `errors`, the fields at fault). A failure without an answer
    (`ConnectionFailed`) has `status` 0.
    """

    def __init__(
        self,
        detail: str,
        *,
        status: int = 0,
        type: str = "about:blank",
        title: str = "",
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{status} {title}: {detail}" if status else detail)
        self.type = type
        self.title = title
        self.status = status
        self.detail = detail
        self.problem: dict[str, Any] = problem if problem is not None else {}


class BadRequest(HourglassError):
    """400: the request is malformed (a purge whose `confirm` is not the queue's name)."""


class Unauthorized(HourglassError):
    """401: no valid bearer token."""


class Forbidden(HourglassError):
    """403: the token may not use this queue."""


class NotFound(HourglassError):
    """404: no such message, cron entry or lock (`type` says which)."""


class RequestTimeout(HourglassError):
    """408: the request's body did not reach the service in time."""


class Conflict(HourglassError):
    """409: the request conflicts with the state of what it names."""


class TooLarge(HourglassError):
    """413: the payload or the whole request is over the service's limit."""


class Invalid(HourglassError):
    """422: a name, field or value breaks the API's rules; nothing was written."""


class ServerError(HourglassError):
    """5xx other than 503: the service (or a proxy before it) failed."""


class Unavailable(HourglassError):
    """503: the service cannot serve now (its database is unreachable); try again after
    `retry_after` seconds (None when the answer did not say)."""

    def __init__(self, detail: str, *, retry_after: float | None = None, **fields: Any) -> None:
        super().__init__(detail, **fields)
        self.retry_after = retry_after


class ConnectionFailed(Unavailable):
    """No answer: the service could not be reached, or the connection broke or timed out
    before its answer arrived (`status` is 0; the httpx error is the `__cause__`)."""


_BY_STATUS: dict[int, type[HourglassError]] = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    408: RequestTimeout,
    409: Conflict,
    413: TooLarge,
    422: Invalid,
    503: Unavailable,
}


def retry_after(response: httpx.Response) -> float | None:
    """The answer's `Retry-After` in seconds (the delay form; a date is not used here)."""
    value = response.headers.get("Retry-After")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def error_from(response: httpx.Response) -> HourglassError:
    """The exception for an answer that is not a success."""
    status = response.status_code
    try:
        body = response.json()
    except ValueError:
        body = None
    problem: dict[str, Any] = body if isinstance(body, dict) else {}
    title = str(problem.get("title") or response.reason_phrase)
    detail = problem.get("detail")
    if not isinstance(detail, str):
        # Not problem+json (a proxy's page, say): keep the start of what came.
        detail = response.text[:200].strip() or title
    error_type = _BY_STATUS.get(status, ServerError if status >= 500 else HourglassError)
    fields: dict[str, Any] = {
        "status": status,
        "type": str(problem.get("type") or "about:blank"),
        "title": title,
        "problem": problem,
    }
    if error_type is Unavailable:
        return Unavailable(detail, retry_after=retry_after(response), **fields)
    return error_type(detail, **fields)
