"""The parameters and answer of a queue's delivery history."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from pydantic import BaseModel, Field

from app.api.schemas.fields import Timestamp
from app.domain.formats import KEY_PATTERN
from app.domain.messages import Finish

KeyFilter = Annotated[str | None, Query(pattern=KEY_PATTERN, description="Only this key's rows")]
OutcomeFilter = Annotated[Finish | None, Query(description="Only rows of this outcome")]


class HistoryEntryResponse(BaseModel):
    key: str
    outcome: Finish = Field(description="How the message left the queue")
    scheduled_at: Timestamp = Field(description="When the producer asked for it")
    created_at: Timestamp
    first_delivered_at: Timestamp | None
    last_delivered_at: Timestamp | None
    deliveries: int = Field(description="How often it was handed to a worker in this queue")
    finished_at: Timestamp = Field(description="When it left the queue")


class HistoryResponse(BaseModel):
    entries: list[HistoryEntryResponse]
    next: str | None = Field(
        description="Pass as `cursor` for the following (older) page; null on the last page"
    )
