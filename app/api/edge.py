"""What every HTTP request passes through before its route, in as few ASGI layers as will do.

A layer is a coroutine call and, for each one that watches the answer, a wrapper
around `send` that every message of the answer goes through. FastAPI 0.165 builds
nine around the router (bench/RESULTS.md, issue 19); here there are four:

- Starlette's ServerErrorMiddleware: an unexpected error is a problem+json 500;
- `RequestEdge`, Hourglass's own, in one layer: the request id (app/api/request_id.py),
  the request's duration by route (app/api/timing.py) and the body's bounds
  (app/api/limits.py); the bearer tokens stay layers of their own, outside it, and
  exist only when tokens are configured (app/api/auth.py);
- Starlette's ExceptionMiddleware: the app's error handlers (app/api/errors.py);
- FastAPI's AsyncExitStackMiddleware, which its routes require.

Left out: FastAPI's native OpenTelemetry (Hourglass's metrics are Prometheus's, at
/metrics; its check alone cost every request ~1% of its CPU) and FastAPI's own
body-size limit, unset here and so a layer that only passed requests on
(`RequestEdge` bounds bodies).
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from prometheus_client import Histogram
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import problem_from
from app.api.limits import BodyLimits
from app.api.request_id import HEADER, current_request_id, request_id_of
from app.api.timing import observe

# FastAPI's native telemetry, off: no tracing, metrics or logs of its own.
NO_TELEMETRY: Any = {"tracing": False, "metrics": False, "logs": False}


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


class RequestEdge:
    """ASGI middleware: for every HTTP request, its id (set for its log lines and echoed as
    `X-Request-ID`), its duration observed in `histogram{method,route,status}`, and its
    body held to `limits`; one wrapper around `send` and one around `receive`."""

    def __init__(self, app: ASGIApp, histogram: Histogram, limits: BodyLimits) -> None:
        self.app = app
        self.histogram = histogram
        self.limits = limits

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
                message["headers"] = [*message.get("headers", []), id_header]
            await send(message)

        try:
            if self.limits.declared_too_large(scope):
                await problem_from(self.limits.too_large())(scope, receive, edge_send)
                return
            await self.app(scope, self.limits.limited(scope, receive), edge_send)
        finally:
            observe(self.histogram, scope, status, time.perf_counter() - started)
            current_request_id.reset(token)
