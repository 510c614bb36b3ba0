"""Request durations by route template, never by raw path: keys must not become labels.

Nor may whatever a client sends as its method (h11, uvicorn's parser when
httptools is missing, takes any token): methods outside the standard ones are
labelled `other`, so the series stay bounded.
"""

from __future__ import annotations

import time

from prometheus_client import Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class RequestTiming:
    """ASGI middleware observing `histogram{method,route,status}` for every HTTP request."""

    def __init__(self, app: ASGIApp, histogram: Histogram) -> None:
        self.app = app
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # if the app fails before answering

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, timed_send)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or "unmatched"
            method = scope["method"] if scope["method"] in _METHODS else "other"
            self.histogram.labels(method=method, route=template, status=str(status)).observe(
                time.perf_counter() - started
            )
