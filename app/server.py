"""uvicorn's Server, plus what Hourglass does the moment it is told to stop.

uvicorn answers SIGTERM by closing its sockets and waiting for requests in
flight, and only then runs the app's shutdown. A long poll may wait 20 s; here
the app hears of the signal at once (`app.state.stopping`), so waiting polls
answer empty straight away and the cron manager stops after its current entry.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from types import FrameType

import uvicorn


class HourglassServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, stopping: Callable[[], None]) -> None:
        super().__init__(config)
        self._stopping = stopping
        self._loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and not self._loop.is_closed():
            # From a signal handler (or another thread): run it on the loop, safely.
            self._loop.call_soon_threadsafe(self._stopping)
