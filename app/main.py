"""create_app(settings): the FastAPI application; its lifespan builds the storage and the
services once, starts their background loops, and stops them in order."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from app import __version__
from app.api.auth import BearerTokens, MetricsTokens, parse_metrics_tokens, parse_tokens
from app.api.edge import HourglassApi, RequestEdge
from app.api.errors import install_error_handlers
from app.api.limits import BodyLimits
from app.api.openapi import install_openapi
from app.api.routes import cron, health, history, locks, messages, queues
from app.clock import Clock, SystemClock
from app.config import Settings
from app.console.policy import PAGE_HEADERS
from app.console.routes import install_console
from app.cron.manager import cron_manager
from app.cron.service import CronService
from app.domain.messages import RandomSource
from app.domain.push import parse_prefixes, parse_secrets
from app.metrics import Metrics
from app.periodic import Periodic
from app.push.dispatcher import PushDispatcher
from app.queue.lists import QueueLists
from app.queue.notifier import Notifier
from app.queue.service import QueueService
from app.queue.upkeep import EXPIRY_SWEEP_BATCH
from app.storage.calls import StorageCalls
from app.storage.engine import create_storage

log = logging.getLogger(__name__)

# How often each replica prunes the delivery history, and rows per DELETE.
HISTORY_PRUNE_SECONDS = 60.0
HISTORY_PRUNE_BATCH = 1000
# How often each replica sweeps expired messages: a message leaves within about this
# long after its expiry, plus the sweep's own time (docs/decisions/0028-expiry.md). An
# idle sweep is one read of the expiry index.
EXPIRY_SWEEP_SECONDS = 0.25

# Allocations between collections of the youngest generation (Python's default: 700).
GC_FIRST_GENERATION_THRESHOLD = 10_000

DESCRIPTION = """\
Hourglass delivers messages at a time in the future. Producers offer a message
under a unique key; workers poll for due messages, receive them under a lease
(a lock id) and acknowledge them; a message whose lease runs out is delivered again.

Times are RFC 3339 strings in UTC with milliseconds; durations are seconds.
Errors are `application/problem+json`.
"""


def _tune_garbage_collector() -> None:
    """Keep Python's cycle collector off the request path as far as is safe.

    Everything alive once the app has started (modules, FastAPI's routes and
    models, SQLAlchemy's compiled statements) lives as long as the process, yet
    every full collection walked it again: profiles of batch offers put ~40% of
    the server's CPU inside pydantic validation, most of it collections that its
    allocations set off. Freezing moves those objects out of the collector's
    sight, and a larger first generation collects less often; cycles are still
    collected.
    """
    gc.freeze()
    _, second, third = gc.get_threshold()
    gc.set_threshold(GC_FIRST_GENERATION_THRESHOLD, second, third)


def create_app(
    settings: Settings | None = None,
    *,
    clock: Clock | None = None,
    random_source: RandomSource | None = None,
    metrics_dir: str | None = None,
) -> FastAPI:
    """The application for `settings` (default: from the environment); tests pass a fake
    `clock`, and a fixed `random_source` for the jitter of retry delays. `metrics_dir`:
    one of several processes, whose metrics are added up there (app/workers.py)."""
    settings = settings or Settings()
    clock = clock or SystemClock()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The shared parts, built once: the storage, the one way async code calls it, and
        # the notifier that wakes long polls; the services are handed them.
        metrics = app.state.metrics
        storage = create_storage(settings)
        storage.listen_statements(metrics.statement_sent)
        calls = StorageCalls(storage, settings.pool_size, settings.lock_timeout)
        notifier = Notifier(clock=clock)
        peers = (
            storage.dialect.peers(settings.database_url, notifier.wake, metrics)
            if settings.listen
            else None
        )
        app.state.peers = peers
        if peers is not None:
            notifier.peers = peers
        service = QueueService(
            storage,
            calls,
            notifier,
            clock,
            default_lease_seconds=settings.default_lease,
            max_payload_bytes=settings.max_payload_bytes,
            max_poll_bytes=settings.max_poll_bytes,
            poll_recheck_seconds=settings.poll_recheck_seconds,
            events=metrics,
            random_source=random_source,
            push_allowed=parse_prefixes(settings.push_allowed),
        )
        app.state.service = service
        app.state.lists = QueueLists(storage, calls, clock, max_page_bytes=settings.max_poll_bytes)
        app.state.cron = CronService(
            storage,
            calls,
            notifier,
            clock,
            max_payload_bytes=settings.max_payload_bytes,
            runs_installed=metrics.cron_runs_installed,
            failed=metrics.error,
        )
        manager = cron_manager(app.state.cron)
        app.state.cron_manager = manager
        retention_ms = round(settings.history_retention * 1000)
        pruner = Periodic(
            "history_prune",
            lambda stopping: service.upkeep.prune_history(
                retention_ms, HISTORY_PRUNE_BATCH, stopping
            ),
            HISTORY_PRUNE_SECONDS,
            failed=metrics.error,
        )
        app.state.history_pruner = pruner
        sweeper = Periodic(
            "expiry_sweep",
            lambda stopping: service.upkeep.expire(EXPIRY_SWEEP_BATCH, stopping),
            EXPIRY_SWEEP_SECONDS,
            failed=metrics.error,
        )
        app.state.expiry_sweeper = sweeper
        dispatcher = PushDispatcher(
            service,
            allowed=service.settings.push_allowed,
            secrets=parse_secrets(settings.push_secrets),
            events=metrics,
        )
        app.state.push_dispatcher = dispatcher
        if peers is not None:
            peers.start()  # with the other background work, once nothing more can fail
        manager.start()
        pruner.start()
        sweeper.start()
        dispatcher.start()
        service.keeper.failed = metrics.error
        service.keeper.start()

        def stopping() -> None:
            """The server was told to stop: claim nothing more for push, answer waiting polls
            now, stop background work soon."""
            dispatcher.request_stop()
            notifier.close()
            manager.request_stop()
            pruner.request_stop()
            sweeper.request_stop()
            service.keeper.request_stop()

        app.state.stopping = stopping
        _tune_garbage_collector()
        try:
            yield
        finally:
            try:
                # Pushes in flight get their grace, and what they held is released, while
                # the storage is still open.
                await dispatcher.stop()
                await manager.stop()
                await pruner.stop()
                await sweeper.stop()
                await service.keeper.stop()
            finally:
                notifier.close()
                if peers is not None:
                    await peers.stop()
                await calls.close()  # waits for calls in flight, then closes the storage

    app = HourglassApi(
        title="Hourglass",
        version=__version__,
        description=DESCRIPTION,
        lifespan=lifespan,
        # Served by install_console from the package's own files, not from a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.settings = settings
    app.state.metrics = Metrics(clock=clock, multiprocess_dir=metrics_dir)
    # Request ids, durations, body limits and the headers of pages: one layer
    # (app/api/edge.py).
    app.add_middleware(
        RequestEdge,
        histogram=app.state.metrics.http_duration,
        limits=BodyLimits(settings.max_request_bytes),
        page_headers=PAGE_HEADERS,
    )
    # Outermost: before anything is read.
    if metrics_tokens := parse_metrics_tokens(settings.metrics_tokens):
        app.add_middleware(MetricsTokens, tokens=metrics_tokens)
    if rules := parse_tokens(settings.api_tokens):
        app.add_middleware(BearerTokens, rules=rules)
        if not metrics_tokens:
            log.warning(
                "/metrics is open while /v1 needs tokens: it names every queue and cron "
                "entry; set HOURGLASS_METRICS_TOKENS to protect it"
            )
    install_error_handlers(app)
    install_openapi(app)
    # Hot routes first: FastAPI tries routes in order, and polls and acks are most requests.
    for module in (locks, messages, cron, queues, history, health):
        app.include_router(module.router)
    install_console(app)
    return app
