"""Cron entries: install, read (with a preview of the next runs), list, pause and resume,
uninstall."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.exceptions import RequestValidationError

from app.api.deps import cron_of
from app.api.openapi import problem_responses
from app.api.rendering import json_response, with_payload
from app.api.schemas.cron import (
    CronEntryResponse,
    CronInstallRequest,
    CronInstallResponse,
    CronListResponse,
    CronName,
    RunsAfter,
    RunsShown,
)
from app.api.schemas.fields import QueueName
from app.cron.service import CronSpec, CronView
from app.domain.cron import DEFAULT_RUNS_SHOWN, InstallOutcome
from app.domain.formats import parse_timestamp

router = APIRouter(prefix="/v1/queues/{queue}/cron", tags=["cron"])


def _answer(view: CronView, outcome: InstallOutcome | None = None) -> bytes:
    """An entry as JSON, its stored payload shown as it is (app/api/rendering.py says why)."""
    entry, schedule = view.entry, view.schedule
    fields = {
        "queue": entry.queue,
        "name": entry.name,
        "cron": schedule.cron,
        "every": schedule.every,
        "daily": sorted(set(schedule.daily)) if schedule.daily is not None else None,
        "timezone": schedule.timezone,
        "payload": None,  # the stored bytes take its place
        "lookahead": None if entry.lookahead_ms is None else entry.lookahead_ms / 1000,
        "priority": entry.priority,
        "group": entry.group,
        "ttl": None if entry.ttl_ms is None else entry.ttl_ms / 1000,
        "config_hash": entry.config_hash,
        "created_at": entry.created_at,
        "updated_at": entry.updated_at,
        "paused": entry.paused_at is not None,
        "paused_at": entry.paused_at,
        "next_runs": view.next_runs,
    }
    answer = (
        CronEntryResponse(**fields)
        if outcome is None
        else CronInstallResponse(**fields, outcome=outcome)
    )
    return with_payload(answer, entry.payload)


@router.put(
    "/{name:path}",
    status_code=status.HTTP_201_CREATED,
    response_model=CronInstallResponse,
    summary="Install a recurring schedule; its runs become ordinary messages of the queue",
    responses={
        200: {"model": CronInstallResponse, "description": "Changed, or unchanged"},
        **problem_responses(413, 422, 503),
    },
    operation_id="installCronEntry",
)
async def install(
    queue: QueueName, name: CronName, body: CronInstallRequest, request: Request
) -> Response:
    spec = CronSpec(
        schedule=body.schedule(),
        payload=body.payload,
        lookahead_seconds=body.lookahead,
        priority=body.priority,
        group=body.group,
        ttl_seconds=body.ttl,
    )
    outcome, view = await cron_of(request).install(queue, name, spec)
    return json_response(
        _answer(view, outcome),
        status.HTTP_201_CREATED if outcome is InstallOutcome.CREATED else status.HTTP_200_OK,
    )


@router.get(
    "",
    response_model=CronListResponse,
    summary="The queue's cron entries, each with its next 5 runs",
    responses=problem_responses(422, 503),
    operation_id="listCronEntries",
)
async def list_entries(queue: QueueName, request: Request) -> Response:
    views = await cron_of(request).list_entries(queue)
    return json_response(b'{"entries":[' + b",".join(map(_answer, views)) + b"]}")


@router.get(
    "/{name:path}",
    response_model=CronEntryResponse,
    summary="One cron entry, with its next `count` runs after `after`",
    responses=problem_responses(404, 422, 503),
    operation_id="getCronEntry",
)
async def get_entry(
    queue: QueueName,
    name: CronName,
    request: Request,
    after: RunsAfter = None,
    count: RunsShown = DEFAULT_RUNS_SHOWN,
) -> Response:
    start = None
    if after is not None:
        try:
            start = parse_timestamp(after)
        except ValueError as error:  # a day its month does not have
            raise _invalid_query("after", str(error)) from error
    return json_response(_answer(await cron_of(request).get(queue, name, after=start, count=count)))


@router.post(
    "/{name:path}/pause",
    response_model=CronEntryResponse,
    summary="Pause a cron entry: it installs no runs, and its runs never delivered go",
    description="Installing it again, changed or not, keeps it paused. Pausing a paused entry "
    "is no error.",
    responses=problem_responses(404, 422, 503),
    operation_id="pauseCronEntry",
)
async def pause_entry(queue: QueueName, name: CronName, request: Request) -> Response:
    return json_response(_answer(await cron_of(request).pause(queue, name)))


@router.post(
    "/{name:path}/resume",
    response_model=CronEntryResponse,
    summary="Resume a cron entry: it installs its runs from now on, none of those it missed",
    description="Resuming an entry that is not paused is no error.",
    responses=problem_responses(404, 422, 503),
    operation_id="resumeCronEntry",
)
async def resume_entry(queue: QueueName, name: CronName, request: Request) -> Response:
    return json_response(_answer(await cron_of(request).resume(queue, name)))


@router.delete(
    "/{name:path}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Uninstall: delete the entry and its runs not yet delivered",
    responses=problem_responses(404, 422, 503),
    operation_id="uninstallCronEntry",
)
async def uninstall(queue: QueueName, name: CronName, request: Request) -> Response:
    await cron_of(request).uninstall(queue, name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _invalid_query(field: str, detail: str) -> RequestValidationError:
    return RequestValidationError(
        [{"type": "value_error", "loc": ("query", field), "msg": detail, "input": None}]
    )
