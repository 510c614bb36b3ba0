"""Polling and leases: poll, acknowledge, extend and release by lock id (all the lock
holds, or some of its keys)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from app.api.deps import service_of
from app.api.openapi import problem_responses
from app.api.rendering import poll_response
from app.api.schemas import (
    AcknowledgeRequest,
    AcknowledgeResponse,
    ExtendRequest,
    ExtendResponse,
    PollRequest,
    PollResponse,
    QueueName,
    ReleaseRequest,
    ReleaseResponse,
)

router = APIRouter(prefix="/v1/queues/{queue}", tags=["polling"])

_LOCK_ERRORS = problem_responses(404, 422, 503)


@router.post(
    "/poll",
    response_model=PollResponse,
    summary="Lease due messages, oldest first; with `wait`, until one is due",
    description="With `ack`, the poll first acknowledges what an earlier poll's lock still "
    "holds (or some of its keys), in a transaction of its own, and its answer adds "
    "`acknowledged` and `missing`: a worker acknowledges what it finished as it asks for "
    "more, in one request.",
    responses=problem_responses(413, 422, 503),
)
async def poll(queue: QueueName, request: Request, body: PollRequest | None = None) -> Response:
    body = body or PollRequest()
    service = service_of(request)
    acknowledged = None
    if body.ack is not None:  # committed before the claim, whatever it finds
        acknowledged = await service.acknowledge_before_poll(queue, body.ack.lock_id, body.ack.keys)
    lease = await service.poll(
        queue,
        limit=body.max,
        lease_seconds=body.lease,
        wait_seconds=body.wait,
        abandoned=request.is_disconnected,
    )
    return poll_response(lease, acknowledged)  # rendered by hand: see app/api/rendering.py


@router.delete(
    "/locks/{lock_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Acknowledge: delete every message the lock still holds",
    responses=_LOCK_ERRORS,
)
async def acknowledge(queue: QueueName, lock_id: str, request: Request) -> Response:
    await service_of(request).acknowledge(queue, lock_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/locks/{lock_id}/ack",
    summary="Acknowledge some of the lock's messages, by key",
    description="Deletes those of `keys` the lock still holds (`acknowledged`); the others "
    "are `missing` and nothing of them changes: a message whose lease ran out and another "
    "poll took, or that an offer updated since, is the lock's no more. What the lock holds "
    "besides stays leased, to acknowledge, extend or release later. Both lists follow the "
    "request's order, each key once. A lock that holds none of them answers `200` too.",
    responses=problem_responses(413, 422, 503),
)
async def acknowledge_keys(
    queue: QueueName, lock_id: str, body: AcknowledgeRequest, request: Request
) -> AcknowledgeResponse:
    outcome = await service_of(request).acknowledge_keys(queue, lock_id, body.keys)
    return AcknowledgeResponse(acknowledged=list(outcome.done), missing=list(outcome.missing))


@router.patch(
    "/locks/{lock_id}",
    summary="Extend the lease of what the lock holds",
    responses=problem_responses(404, 413, 422, 503),
)
async def extend(
    queue: QueueName, lock_id: str, body: ExtendRequest, request: Request
) -> ExtendResponse:
    lease_expires_at = await service_of(request).extend(queue, lock_id, body.lease)
    return ExtendResponse(lease_expires_at=lease_expires_at)


@router.post(
    "/locks/{lock_id}/release",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Give the messages back without acknowledging them",
    description="Due again after `delay`, or without it after the queue's `retry` delay "
    "(each message's own, by its deliveries), or at once when the queue has none. Without "
    "`keys`, everything the lock holds: `204`, or `404` when it holds nothing. With `keys`, "
    "only those it still holds: `200` with `released` and `missing`, as for acknowledging "
    "by key.",
    responses={
        200: {"model": ReleaseResponse, "description": "Released by key"},
        **problem_responses(404, 413, 422, 503),
    },
)
async def release(
    queue: QueueName, lock_id: str, request: Request, body: ReleaseRequest | None = None
) -> Response:
    service = service_of(request)
    body = body or ReleaseRequest()
    if body.keys is None:
        await service.release(queue, lock_id, body.delay)
        return Response(status_code=status.HTTP_204_NO_CONTENT)
    outcome = await service.release_keys(queue, lock_id, body.keys, body.delay)
    answer = ReleaseResponse(released=list(outcome.done), missing=list(outcome.missing))
    return Response(answer.model_dump_json(), media_type="application/json")
