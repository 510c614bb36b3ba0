"""Queues: stats of one or all, pause and resume, purge, settings, and redriving dead letters."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request

from app.api.deps import allowed_queues, service_of
from app.api.openapi import problem_responses
from app.api.schemas.fields import QueueName
from app.api.schemas.queues import (
    PurgeResponse,
    PushResponse,
    PushSettings,
    QueueListResponse,
    QueueSettingsRequest,
    QueueSettingsResponse,
    QueueStatsResponse,
    RateResponse,
    RateSettings,
    RedriveRequest,
    RedriveResponse,
    RetryResponse,
    RetrySettings,
)
from app.domain.formats import QUEUE_PATTERN, seconds_to_ms
from app.domain.messages import PushTarget, QueueSettings, QueueStats, Rate, RetryPolicy

router = APIRouter(prefix="/v1/queues", tags=["queues"])


def _stats_response(stats: QueueStats) -> QueueStatsResponse:
    return QueueStatsResponse.model_validate(stats, from_attributes=True)


@router.get(
    "",
    summary="Every queue that holds messages, with its stats",
    responses=problem_responses(503),
    operation_id="listQueues",
)
async def list_queues(request: Request) -> QueueListResponse:
    # A token limited to some queues sees only those.
    allowed = allowed_queues(request)
    return QueueListResponse(
        queues=[
            _stats_response(stats)
            for stats in await service_of(request).list_queues()
            if allowed(stats.queue)
        ]
    )


@router.get(
    "/{queue}",
    summary="A queue's stats (zeros for an unknown queue)",
    responses=problem_responses(422, 503),
    operation_id="getQueueStats",
)
async def queue_stats(queue: QueueName, request: Request) -> QueueStatsResponse:
    return _stats_response(await service_of(request).stats(queue))


@router.post(
    "/{queue}/pause",
    summary="Pause the queue: it delivers nothing until resumed, and takes everything else",
    description="Polls answer empty after their wait and push sends nothing, on every replica "
    "within a second; offers, updates, deletes, acknowledgements, extends, releases and lists "
    "go on. Stored: a restart keeps it. Pausing a paused queue is no error (`paused_at` stays "
    "the first pause's), and any queue name may be paused.",
    responses=problem_responses(422, 503),
    operation_id="pauseQueue",
)
async def pause_queue(queue: QueueName, request: Request) -> QueueStatsResponse:
    return _stats_response(await service_of(request).pause(queue))


@router.post(
    "/{queue}/resume",
    summary="Resume a paused queue: polls waiting on it wake",
    description="Resuming a queue that is not paused is no error.",
    responses=problem_responses(422, 503),
    operation_id="resumeQueue",
)
async def resume_queue(queue: QueueName, request: Request) -> QueueStatsResponse:
    return _stats_response(await service_of(request).resume(queue))


# `confirm` is required, and the schema says so: a request without it is not one the
# schema allows. The service still answers it (and a `confirm` naming another queue)
# with a 400 that says how to confirm, so FastAPI reads the parameter as optional and
# the schema gets it from here.
_CONFIRM_PARAMETER = {
    "name": "confirm",
    "in": "query",
    "required": True,
    "description": "The queue's name, again; without it, or with another name: `400`",
    "schema": {"type": "string", "pattern": QUEUE_PATTERN},
}


@router.delete(
    "/{queue}",
    summary="Delete every message of the queue; `confirm` must repeat its name",
    responses=problem_responses(400, 422, 503),
    openapi_extra={"parameters": [_CONFIRM_PARAMETER]},
    operation_id="purgeQueue",
)
async def purge_queue(
    queue: QueueName,
    request: Request,
    confirm: Annotated[str | None, Query(include_in_schema=False)] = None,
) -> PurgeResponse:
    return PurgeResponse(deleted=await service_of(request).purge(queue, confirm))


def _settings_response(settings: QueueSettings, default_lease_ms: int) -> QueueSettingsResponse:
    retry, push = settings.retry, settings.push
    return QueueSettingsResponse(
        queue=settings.queue,
        default_lease=(settings.default_lease_ms or default_lease_ms) / 1000,
        max_deliveries=settings.max_deliveries,
        dead_letter_queue=settings.effective_dead_letter_queue,
        retry=None
        if retry is None
        else RetryResponse(
            initial_delay=retry.initial_delay_ms / 1000,
            max_delay=retry.max_delay_ms / 1000,
            multiplier=retry.multiplier,
            jitter=retry.jitter,
        ),
        push=None
        if push is None
        else PushResponse(
            url=push.url, timeout=push.timeout_ms / 1000, concurrency=push.concurrency
        ),
        group_concurrency=settings.effective_group_concurrency,
        max_leased=settings.max_leased,
        rate=None
        if settings.rate is None
        else RateResponse(limit=settings.rate.limit, period=settings.rate.period_ms / 1000),
        updated_at=settings.updated_at,
    )


def _retry_policy(retry: RetrySettings | None) -> RetryPolicy | None:
    if retry is None:
        return None
    return RetryPolicy(
        initial_delay_ms=seconds_to_ms(retry.initial_delay),
        max_delay_ms=seconds_to_ms(retry.max_delay),
        multiplier=retry.multiplier,
        jitter=retry.jitter,
    )


def _push_target(push: PushSettings | None) -> PushTarget | None:
    if push is None:
        return None
    # At least 1 ms: any timeout above 0 is accepted.
    timeout_ms = max(1, seconds_to_ms(push.timeout))
    return PushTarget(url=push.url, timeout_ms=timeout_ms, concurrency=push.concurrency)


def _rate(rate: RateSettings | None) -> Rate | None:
    if rate is None:
        return None
    # At least 1 ms: any period from 0.001 s is accepted.
    return Rate(limit=rate.limit, period_ms=max(1, seconds_to_ms(rate.period)))


@router.get(
    "/{queue}/settings",
    summary="A queue's settings, defaults filled in",
    responses=problem_responses(422, 503),
    operation_id="getQueueSettings",
)
async def get_settings(queue: QueueName, request: Request) -> QueueSettingsResponse:
    service = service_of(request)
    return _settings_response(await service.settings.get(queue), service.default_lease_ms)


@router.put(
    "/{queue}/settings",
    summary="Replace a queue's settings: default lease, delivery limit, dead-letter queue, "
    "retry delays, push, group concurrency, leases at once and rate",
    description="A field left out goes back to its default. Other replicas apply a change "
    "within 5 seconds. A `push` url must match a prefix of the service's "
    "HOURGLASS_PUSH_ALLOWED, else `422` (always `422` when that is unset). `max_leased` and "
    "`rate` hold across every replica and process on every database the service runs on "
    "(docs/guide/flow-control.md). A token limited to some queues gets `403` when the queue dead letters "
    "would go to (named, or the default `{queue}.dead`) is outside them.",
    responses=problem_responses(403, 422, 503),
    operation_id="replaceQueueSettings",
)
async def put_settings(
    queue: QueueName, body: QueueSettingsRequest, request: Request
) -> QueueSettingsResponse:
    service = service_of(request)
    settings = await service.settings.put(
        queue,
        default_lease_seconds=body.default_lease,
        max_deliveries=body.max_deliveries,
        dead_letter_queue=body.dead_letter_queue,
        retry=_retry_policy(body.retry),
        push=_push_target(body.push),
        group_concurrency=body.group_concurrency,
        max_leased=body.max_leased,
        rate=_rate(body.rate),
        may_use=allowed_queues(request),
    )
    return _settings_response(settings, service.default_lease_ms)


@router.post(
    "/{queue}/redrive",
    summary="Move a dead-letter queue's messages back, due now",
    description="To `to`, or each to the queue it was dead-lettered from, oldest first; "
    "messages a worker holds stay, and so do those whose key the target queue holds "
    "(`skipped`) and, for a token limited to some queues, those whose queue of origin is "
    "outside them (`forbidden`). A `to` outside them is `403`.",
    responses=problem_responses(403, 422, 503),
    operation_id="redriveQueue",
)
async def redrive(queue: QueueName, body: RedriveRequest, request: Request) -> RedriveResponse:
    result = await service_of(request).upkeep.redrive(
        queue, body.to, body.max or 2**63 - 1, allowed_queues(request)
    )
    return RedriveResponse(moved=result.moved, skipped=result.skipped, forbidden=result.forbidden)
