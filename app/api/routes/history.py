"""A queue's delivery history: the rows written as messages leave it, newest first."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.api.deps import lists_of
from app.api.openapi import problem_responses
from app.api.schemas.fields import Cursor, PageLimit, QueueName
from app.api.schemas.history import (
    HistoryEntryResponse,
    HistoryResponse,
    KeyFilter,
    OutcomeFilter,
)
from app.domain.pages import DEFAULT_PAGE

router = APIRouter(prefix="/v1/queues/{queue}", tags=["history"])


@router.get(
    "/history",
    summary="List the queue's delivery history, newest first; a page at a time",
    responses=problem_responses(404, 422, 503),
    operation_id="listHistory",
)
async def list_history(
    queue: QueueName,
    request: Request,
    key: KeyFilter = None,
    outcome: OutcomeFilter = None,
    limit: PageLimit = DEFAULT_PAGE,
    cursor: Cursor = None,
) -> HistoryResponse:
    """A row is written when a message leaves the queue: acknowledged, dead-lettered, or
    dropped (deleted, purged, replaced, a cron run withdrawn), while
    HOURGLASS_HISTORY is on; rows older than HOURGLASS_HISTORY_RETENTION are pruned."""
    page = await lists_of(request).history(
        queue, key=key, outcome=outcome, cursor=cursor, limit=limit
    )
    return HistoryResponse(
        entries=[
            HistoryEntryResponse(
                key=entry.key,
                outcome=entry.outcome,
                scheduled_at=entry.scheduled_at,
                created_at=entry.created_at,
                first_delivered_at=entry.first_delivered_at,
                last_delivered_at=entry.last_delivered_at,
                deliveries=entry.deliveries,
                finished_at=entry.finished_at,
            )
            for entry in page.entries
        ],
        next=page.next,
    )
