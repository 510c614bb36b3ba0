"""Request dependencies: what a route needs, reached through `app.state`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.config import Settings
from app.queue.service import QueueService


# async: FastAPI would run a plain function on a thread pool for every request.
async def get_service(request: Request) -> QueueService:
    return request.app.state.service


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


Service = Annotated[QueueService, Depends(get_service)]
CurrentSettings = Annotated[Settings, Depends(get_settings)]
