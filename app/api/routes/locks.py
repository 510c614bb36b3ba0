"""Polling and leases: poll, acknowledge, extend and release by lock id (all the lock
holds, or some of its keys). Every route here is hot: served by a LeanRoute
(app/api/lean.py), answered with bytes rendered once (app/api/rendering.py)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from app.api.deps import service_of
from app.api.lean import lean_route
from app.api.openapi import problem_responses
from app.api.rendering import extend_response, keyed_response, poll_response
from app.api.schemas.fields import QueueName
from app.api.schemas.locks import (
    AcknowledgeRequest,
    AcknowledgeResponse,
    ExtendRequest,
    ExtendResponse,
    PollRequest,
    PollResponse,
    ReleaseRequest,
    ReleaseResponse,
)

router = APIRouter(prefix="/v1/queues/{queue}", tags=["polling"])

_LOCK_ERRORS = problem_responses(404, 422, 503)


def _no_content() -> Response:
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@lean_route(
    router,
    "POST",
    "/poll",
    response_model=PollResponse,
    summary="Lease due messages, oldest first; with `wait`, until one is due",
    description="With `ack`, the poll first acknowledges what an earlier poll's lock still "
    "holds (or some of its keys), in a transaction of its own, and its answer adds "
    "`acknowledged` and `missing`: a worker acknowledges what it finished as it asks for "
    "more, in one request.",
    responses=problem_responses(413, 422, 503),
    operation_id="pollQueue",
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


@lean_route(
    router,
    "DELETE",
    "/locks/{lock_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Acknowledge: delete every message the lock still holds",
    responses=_LOCK_ERRORS,
    operation_id="acknowledgeLock",
)
async def acknowledge(queue: QueueName, lock_id: str, request: Request) -> Response:
    await service_of(request).acknowledge(queue, lock_id)
    return _no_content()


@lean_route(
    router,
    "POST",
    "/locks/{lock_id}/ack",
    response_model=AcknowledgeResponse,
    summary="Acknowledge some of the lock's messages, by key",
    description="Deletes those of `keys` the lock still holds (`acknowledged`); the others "
    "are `missing` and nothing of them changes: a message whose lease ran out and another "
    "poll took, or that an offer updated since, is the lock's no more. What the lock holds "
    "besides stays leased, to acknowledge, extend or release later. Both lists follow the "
    "request's order, each key once. A lock that holds none of them answers `200` too.",
    responses=problem_responses(413, 422, 503),
    operation_id="acknowledgeKeys",
)
async def acknowledge_keys(
    queue: QueueName, lock_id: str, body: AcknowledgeRequest, request: Request
) -> Response:
    outcome = await service_of(request).acknowledge_keys(queue, lock_id, body.keys)
    return keyed_response("acknowledged", outcome)


@lean_route(
    router,
    "PATCH",
    "/locks/{lock_id}",
    response_model=ExtendResponse,
    summary="Extend the lease of what the lock holds",
    description="A lease that has run out still belongs to its lock until a poll takes its "
    "messages again, and an extend makes it leased again; in a queue with `max_leased`, only "
    "while the limit has room for it, else `404` and nothing changes (docs/guide/flow-control.md).",
    responses=problem_responses(404, 413, 422, 503),
    operation_id="extendLock",
)
async def extend(queue: QueueName, lock_id: str, body: ExtendRequest, request: Request) -> Response:
    return extend_response(await service_of(request).extend(queue, lock_id, body.lease))


@lean_route(
    router,
    "POST",
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
    operation_id="releaseLock",
)
async def release(
    queue: QueueName, lock_id: str, request: Request, body: ReleaseRequest | None = None
) -> Response:
    service = service_of(request)
    body = body or ReleaseRequest()
    if body.keys is None:
        await service.release(queue, lock_id, body.delay)
        return _no_content()
    outcome = await service.release_keys(queue, lock_id, body.keys, body.delay)
    return keyed_response("released", outcome)
