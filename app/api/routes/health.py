"""Liveness, readiness and metrics: open endpoints for orchestrators and scrapers."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response

from app.api.deps import cron_of, metrics_of, service_of
from app.api.errors import unavailable
from app.api.openapi import problem_responses
from app.api.schemas.health import HealthResponse, ReadyResponse
from app.domain.errors import StorageUnavailable

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="200 while the process runs", operation_id="checkLiveness")
async def healthz() -> HealthResponse:
    return HealthResponse(status="ok")


@router.get(
    "/readyz",
    response_model=ReadyResponse,
    summary="200 when the database answers and its schema is at this release's head",
    responses=problem_responses(503),
    operation_id="checkReadiness",
)
async def readyz(request: Request) -> ReadyResponse | Response:  # Response: the 503
    try:
        schema = await service_of(request).upkeep.schema_status()
    except StorageUnavailable:
        return unavailable("the database does not answer")
    if not schema.ready:
        return unavailable(
            f"the schema is at {schema.current or 'nothing'}, not {schema.expected}: "
            "run `hourglass migrate`"
        )
    return ReadyResponse(status="ready", schema_revision=schema.expected)


@router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain; version=0.0.4": {"schema": {"type": "string"}}}}},
    operation_id="getMetrics",
)
async def metrics(request: Request) -> Response:
    service = service_of(request)

    async def ready() -> bool:
        return (await service.upkeep.schema_status()).ready

    metrics = metrics_of(request)
    await metrics.refresh_queues(
        service.list_queues,
        service.settings.configured,
        cron_of(request).entry_names,
        read_ready=ready,
        read_table_health=service.upkeep.table_health,
    )
    return Response(metrics.exposition(), media_type=metrics.content_type)
