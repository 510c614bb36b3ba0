"""Queues: stats of one or all, and purge."""

from __future__ import annotations

from fnmatch import fnmatchcase
from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.api.auth import queue_glob
from app.api.deps import Service
from app.api.openapi import problem_responses
from app.api.schemas import PurgeResponse, QueueListResponse, QueueName, QueueStatsResponse
from app.queue.models import QueueStats

router = APIRouter(prefix="/v1/queues", tags=["queues"])


def _stats_response(stats: QueueStats) -> QueueStatsResponse:
    return QueueStatsResponse.model_validate(stats, from_attributes=True)


@router.get(
    "", summary="Every queue that holds messages, with its stats", responses=problem_responses(503)
)
async def list_queues(service: Service, request: Request) -> QueueListResponse:
    glob = queue_glob(request.scope)  # a token limited to some queues sees only those
    return QueueListResponse(
        queues=[
            _stats_response(stats)
            for stats in await service.list_queues()
            if glob is None or fnmatchcase(stats.queue, glob)
        ]
    )


@router.get(
    "/{queue}",
    summary="A queue's stats (zeros for an unknown queue)",
    responses=problem_responses(422, 503),
)
async def queue_stats(queue: QueueName, service: Service) -> QueueStatsResponse:
    return _stats_response(await service.stats(queue))


@router.delete(
    "/{queue}",
    summary="Delete every message of the queue; `confirm` must repeat its name",
    responses=problem_responses(400, 422, 503),
)
async def purge_queue(
    queue: QueueName,
    service: Service,
    confirm: Annotated[str | None, Query(description="The queue's name, again")] = None,
) -> PurgeResponse:
    return PurgeResponse(deleted=await service.purge(queue, confirm))
