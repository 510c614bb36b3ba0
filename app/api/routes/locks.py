"""Polling and leases: poll, acknowledge, extend and release by lock id."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from app.api.deps import Service
from app.api.openapi import problem_responses
from app.api.rendering import poll_response
from app.api.schemas import (
    ExtendRequest,
    ExtendResponse,
    PollRequest,
    PollResponse,
    QueueName,
    ReleaseRequest,
)

router = APIRouter(prefix="/v1/queues/{queue}", tags=["polling"])

_LOCK_ERRORS = problem_responses(404, 422, 503)


@router.post(
    "/poll",
    response_model=PollResponse,
    summary="Lease due messages, oldest first; with `wait`, until one is due",
    responses=problem_responses(413, 422, 503),
)
async def poll(
    queue: QueueName, service: Service, request: Request, body: PollRequest | None = None
) -> Response:
    body = body or PollRequest()
    lease = await service.poll(
        queue,
        limit=body.max,
        lease_seconds=body.lease,
        wait_seconds=body.wait,
        abandoned=request.is_disconnected,
    )
    return poll_response(lease)  # rendered by hand: see app/api/rendering.py


@router.delete(
    "/locks/{lock_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Acknowledge: delete every message the lock still holds",
    responses=_LOCK_ERRORS,
)
async def acknowledge(queue: QueueName, lock_id: str, service: Service) -> Response:
    await service.acknowledge(queue, lock_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.patch(
    "/locks/{lock_id}",
    summary="Extend the lease of what the lock holds",
    responses=problem_responses(404, 413, 422, 503),
)
async def extend(
    queue: QueueName, lock_id: str, body: ExtendRequest, service: Service
) -> ExtendResponse:
    return ExtendResponse(lease_expires_at=await service.extend(queue, lock_id, body.lease))


@router.post(
    "/locks/{lock_id}/release",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Give the messages back without acknowledging them",
    responses=problem_responses(404, 413, 422, 503),
)
async def release(
    queue: QueueName, lock_id: str, service: Service, body: ReleaseRequest | None = None
) -> Response:
    await service.release(queue, lock_id, (body or ReleaseRequest()).delay)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
