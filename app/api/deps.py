"""What a route needs from the app, and the one way it gets it: the route takes the
`Request` and calls this module.

    async def get_message(queue: QueueName, key: MessageKey, request: Request) -> Response:
        service = service_of(request)

Each function is a plain read of what the lifespan put in `app.state` (the services,
app/main.py) or of what the bearer-token layer left in the request's scope (the token's
queues, app/api/auth.py). No route declares these as FastAPI `Depends`: FastAPI solves
every sub-dependency recursively on every request, ~100 `isinstance` calls and a few
percent of an empty poll's CPU (bench/ARCHIVE.md), and the hot routes' LeanRoute
(app/api/lean.py, docs/decisions/0022-one-hop-per-request.md) solves no dependency at
all. A call here costs one Python call on any route, lean or not, so every route asks
the same way, and a route moved onto or off the hot path keeps its body.
tests/api/test_lean_routes.py holds the hot routes to no dependency solving, and
`python -m bench.calls` counts their calls per request.
"""

from __future__ import annotations

from fastapi import Request

from app.api.auth import QUEUE_FILTER
from app.cron.service import CronService
from app.domain.messages import QueueFilter, every_queue
from app.metrics import Metrics
from app.queue.lists import QueueLists
from app.queue.service import QueueService


def service_of(request: Request) -> QueueService:
    """The queue service: offers, polls, leases, settings, stats."""
    return request.app.state.service


def lists_of(request: Request) -> QueueLists:
    """A queue's lists: pages of its messages and of its delivery history."""
    return request.app.state.lists


def cron_of(request: Request) -> CronService:
    """The cron service: entries and their runs."""
    return request.app.state.cron


def metrics_of(request: Request) -> Metrics:
    """The service's metrics: what /metrics shows, fed by the services' events."""
    return request.app.state.metrics


def allowed_queues(request: Request) -> QueueFilter:
    """The queues the request's token may use (any, without tokens configured), for the
    queues a request reaches beyond its path: a dead-letter queue, a redrive's targets, a
    dead letter's origin. The path's own queue the token layer has checked already."""
    return request.scope.get("state", {}).get(QUEUE_FILTER, every_queue)
