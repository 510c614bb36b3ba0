"""What every HTTP request passes through before its route, in as few ASGI layers as will do.

A layer is a coroutine call and, for each one that watches the answer, a wrapper
around `send` that every message of the answer goes through. FastAPI 0.165 builds
nine around the router (bench/ARCHIVE.md); here there are four:

- Starlette's ServerErrorMiddleware: an unexpected error is a problem+json 500;
- `RequestEdge`, Hourglass's own, in one layer: the request id (below), the request's
  duration by route (below), the body's bounds (app/api/limits.py) and the headers
  that keep a browser from running what it should not (below); the bearer
  tokens stay layers of their own, outside it, and exist only when tokens are
  configured (app/api/auth.py);
- Starlette's ExceptionMiddleware: the app's error handlers (app/api/errors.py);
- FastAPI's AsyncExitStackMiddleware, which its routes require.

Left out: FastAPI's native OpenTelemetry (Hourglass's metrics are Prometheus's, at
/metrics; its check alone cost every request ~1% of its CPU) and FastAPI's own
body-size limit, unset here and so a layer that only passed requests on
(`RequestEdge` bounds bodies).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import problem_from
from app.api.limits import BodyLimits

if TYPE_CHECKING:
    # Only its type: app/logs.py reads the request id from here before --workers has set
    # prometheus-client's directory (app/workers.py), so the module may not import it.
    from prometheus_client import Histogram

# FastAPI's native telemetry, off: no tracing, metrics or logs of its own.
NO_TELEMETRY: Any = {"tracing": False, "metrics": False, "logs": False}


# A request id for every request: the client's `X-Request-ID` if it sent a sane one, else
# new. It is returned as `X-Request-ID` and attached to every log line written while the
# request is handled (app/logs.py), so a client's complaint can be found in the logs.
current_request_id: ContextVar[str | None] = ContextVar("current_request_id", default=None)

HEADER = b"x-request-id"
# What we accept from a client: short, printable, no spaces (it goes into logs).
_ACCEPTABLE = re.compile(rb"[!-~]{1,128}")


def request_id_of(scope: Scope) -> str:
    """The id of the request `scope` describes: the client's, if sane, else a new one."""
    offered = next((value for name, value in scope["headers"] if name == HEADER), None)
    if offered and _ACCEPTABLE.fullmatch(offered):
        return offered.decode()
    return os.urandom(16).hex()  # as random as uuid4().hex, without building a UUID


# Request durations by route template, never by raw path: keys must not become labels.
# Nor may whatever a client sends as its method (h11, uvicorn's parser when httptools is
# missing, takes any token): methods outside the standard ones are labelled `other`, so
# the series stay bounded.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def observe(histogram: Histogram, scope: Scope, status: int, seconds: float) -> None:
    """`histogram{method,route,status}` observes one request that took `seconds`."""
    route = scope.get("route")
    template = getattr(route, "path", None) or "unmatched"
    method = scope["method"] if scope["method"] in _METHODS else "other"
    histogram.labels(method=method, route=template, status=str(status)).observe(seconds)


class HourglassApi(FastAPI):
    """FastAPI with the middleware stack above: the app's own middlewares (`add_middleware`)
    between the error layers, nothing of FastAPI's telemetry or body limit."""

    def __init__(self, **options: Any) -> None:
        super().__init__(telemetry=NO_TELEMETRY, **options)

    def build_middleware_stack(self) -> ASGIApp:
        error_handler = None
        handlers: dict[Any, Any] = {}
        for key, value in self.exception_handlers.items():
            if key in (500, Exception):
                error_handler = value
            else:
                handlers[key] = value
        app: ASGIApp = AsyncExitStackMiddleware(self.router)
        app = ExceptionMiddleware(app, handlers=handlers, debug=self.debug)
        for middleware in reversed(self.user_middleware):
            app = middleware.cls(app, *middleware.args, **middleware.kwargs)
        return ServerErrorMiddleware(app, handler=error_handler, debug=self.debug)


# Every answer that passes here, a JSON body or a file, is read as the type it says it is:
# never sniffed into HTML (and so into a page that runs script) by a browser that opens
# it. And every answer a browser renders as a document that may run script (HTML, SVG
# or XML opened by itself) gets each of the page headers the app was given that it does not
# carry already, whichever route, file or error it comes from: no route has to remember
# them. A route sets one itself only to say more (/redoc's policy: a nonce for its
# styles, app/console/policy.py), and tests/api/test_pages.py holds every page to them.
NO_SNIFFING = (b"x-content-type-options", b"nosniff")
# Types a browser renders as a document that may run script: HTML, SVG, and XML (whose
# XHTML or SVG elements run theirs). The service serves only the first two today.
_PAGE_TYPES = (
    b"text/html",
    b"image/svg+xml",
    b"application/xhtml+xml",
    b"application/xml",
    b"text/xml",
)


def is_page(headers: list[tuple[bytes, bytes]]) -> bool:
    """Whether an answer with `headers` is one a browser renders as a page with scripts."""
    for name, value in headers:
        if name.lower() == b"content-type":
            return value.split(b";", 1)[0].strip().lower() in _PAGE_TYPES
    return False


class RequestEdge:
    """ASGI middleware: for every HTTP request, its id (set for its log lines and echoed as
    `X-Request-ID`), its duration observed in `histogram{method,route,status}`, its body
    held to `limits`, `X-Content-Type-Options: nosniff`, and on a page `page_headers`; one
    wrapper around `send` and one around `receive`."""

    def __init__(
        self,
        app: ASGIApp,
        histogram: Histogram,
        limits: BodyLimits,
        page_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.app = app
        self.histogram = histogram
        self.limits = limits
        self.page_headers = [
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in (page_headers or {}).items()
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id = request_id_of(scope)
        id_header = (HEADER, request_id.encode())
        token = current_request_id.set(request_id)
        status = 500  # if the app fails before answering

        async def edge_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = message.get("headers", [])
                added = self._page_headers_missing(headers) if self.page_headers else ()
                message["headers"] = [*headers, id_header, NO_SNIFFING, *added]
            await send(message)

        try:
            if self.limits.declared_too_large(scope):
                await problem_from(self.limits.too_large())(scope, receive, edge_send)
                return
            await self.app(scope, self.limits.limited(scope, receive), edge_send)
        finally:
            observe(self.histogram, scope, status, time.perf_counter() - started)
            current_request_id.reset(token)

    def _page_headers_missing(
        self, headers: list[tuple[bytes, bytes]]
    ) -> list[tuple[bytes, bytes]]:
        """The page headers an answer with `headers` lacks, if it is a page; else none."""
        if not is_page(headers):
            return []
        present = {name.lower() for name, _ in headers}
        return [header for header in self.page_headers if header[0] not in present]
