"""The body of every error answer: application/problem+json."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Problem(BaseModel):
    """An error, as `application/problem+json` (RFC 9457)."""

    model_config = ConfigDict(extra="allow")

    type: str
    title: str
    status: int
    detail: str
