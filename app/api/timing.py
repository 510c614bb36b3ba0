"""Request durations by route template, never by raw path: keys must not become labels.

Nor may whatever a client sends as its method (h11, uvicorn's parser when
httptools is missing, takes any token): methods outside the standard ones are
labelled `other`, so the series stay bounded. The request's layer
(app/api/edge.py) times every HTTP request and observes it here.
"""

from __future__ import annotations

from prometheus_client import Histogram
from starlette.types import Scope

_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def observe(histogram: Histogram, scope: Scope, status: int, seconds: float) -> None:
    """`histogram{method,route,status}` observes one request that took `seconds`."""
    route = scope.get("route")
    template = getattr(route, "path", None) or "unmatched"
    method = scope["method"] if scope["method"] in _METHODS else "other"
    histogram.labels(method=method, route=template, status=str(status)).observe(seconds)
