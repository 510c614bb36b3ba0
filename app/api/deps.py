"""Request dependencies: what a route needs, reached through `app.state`."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.auth import queue_filter
from app.config import Settings
from app.cron.service import CronService
from app.domain.messages import QueueFilter
from app.queue.lists import QueueLists
from app.queue.service import QueueService


# async: FastAPI would run a plain function on a thread pool for every request.
async def get_service(request: Request) -> QueueService:
    return request.app.state.service


def service_of(request: Request) -> QueueService:
    """The service, for the routes of messages and leases (most requests), which take the
    `Request` and call this instead of a `Service` dependency: FastAPI solves each
    sub-dependency recursively on every request, ~100 `isinstance` calls and a few
    percent of an empty poll's CPU (bench/RESULTS.md, issue 19)."""
    return request.app.state.service


async def get_lists(request: Request) -> QueueLists:
    return request.app.state.lists


async def get_cron(request: Request) -> CronService:
    return request.app.state.cron


async def get_settings(request: Request) -> Settings:
    return request.app.state.settings


async def get_queue_filter(request: Request) -> QueueFilter:
    return queue_filter(request.scope)


Service = Annotated[QueueService, Depends(get_service)]
Lists = Annotated[QueueLists, Depends(get_lists)]
Cron = Annotated[CronService, Depends(get_cron)]
# The queues the request's token may use, for the queues a request names beyond its path.
AllowedQueues = Annotated[QueueFilter, Depends(get_queue_filter)]
CurrentSettings = Annotated[Settings, Depends(get_settings)]
