"""uvicorn's Server, plus what Hourglass does the moment it is told to stop, and the bounds it
keeps on client connections.

Stopping: uvicorn answers SIGTERM by closing its sockets and waiting for requests in
flight, and only then runs the app's shutdown. A long poll may wait 20 s; here the app
hears of the signal at once (`app.state.stopping`), so waiting polls answer empty
straight away and the cron manager stops after its current entry.

Connections: uvicorn keeps a connection open for as long as its client sends a byte
now and then, and one that sends nothing at all until the client goes; with 1,024
open files, ~1,000 such connections from one client stopped `/healthz` answering.
Here a connection must deliver each request's head (request line and headers) within
`head_timeout` of its opening or of its previous answer, else it is closed (nothing
can be answered reliably before the head is whole). The body's own deadline is the
app's (app/api/limits.py), which can still answer 408. Connections are capped per
client address and in all, the total fitted under the process's open-file limit (its
soft limit raised to the hard one first) so that accepting never runs out of files.
At the total cap, a new connection takes the place of the one that has waited longest
for a request head (idle or trickling); only when none waits is it refused.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any, Protocol

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.config import Settings

logger = logging.getLogger(__name__)

# Open files kept back from client connections: the database pool (three files per
# SQLite connection), logs, the event loop, listening sockets, a connection being
# refused. A tenth of the limit, at least 64: 1,024 files leave 922 connections.
MIN_RESERVED_FILES = 64
# A refused or closed connection is logged at most this often per reason.
WARNING_INTERVAL_SECONDS = 60.0


class ConnectionEvents(Protocol):
    """What the guard reports (app.metrics.Metrics implements it)."""

    def connection_dropped(self, reason: str) -> None: ...

    def watch_connections(self, open_connections: Callable[[], int]) -> None: ...


@dataclass(frozen=True)
class ConnectionLimits:
    head_timeout: float
    max_connections: int
    max_per_client: int  # 0: no cap per client

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            head_timeout=settings.request_head_timeout,
            max_connections=settings.max_connections,
            max_per_client=settings.max_connections_per_client,
        )


def raise_open_file_limit() -> int:
    """Raise this process's soft limit of open files to its hard limit; return the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as error:
            logger.warning(
                "open files: could not raise the limit from %d to %d: %s", soft, hard, error
            )
        else:
            logger.info("open files: limit raised from %d to %d (the hard limit)", soft, hard)
            return hard
    logger.info("open files: limit %d (hard limit %s)", soft, hard)
    return soft


def fit_to_open_files(max_connections: int, open_files: int) -> int:
    """The connection cap that leaves the process its reserve of open files."""
    reserved = max(MIN_RESERVED_FILES, open_files // 10)
    return max(1, min(max_connections, open_files - reserved))


class ConnectionGuard:
    """Admits connections under the caps; knows, oldest first, those waiting for a head."""

    def __init__(self, limits: ConnectionLimits, events: ConnectionEvents | None) -> None:
        self.limits = limits
        self.capacity = limits.max_connections
        self.open = 0
        self._open_by_client: dict[str | None, int] = {}
        # Insertion-ordered: the first is the connection that has waited longest.
        self.waiting_for_head: dict[GuardedHttpProtocol, None] = {}
        self._events = events
        self._warned_at: dict[str, float] = {}
        if events is not None:
            events.watch_connections(lambda: self.open)

    def admit(self, client: str | None) -> bool:
        """Count a new connection from `client` in, or refuse it (False)."""
        per_client = self.limits.max_per_client
        if per_client and self._open_by_client.get(client, 0) >= per_client:
            self.dropped("client_cap", f"{client} has {per_client} connections open")
            return False
        if self.open >= self.capacity:
            if not self.waiting_for_head:
                self.dropped("server_cap", f"{self.open} connections open, none idle")
                return False
            oldest = next(iter(self.waiting_for_head))
            oldest.drop("evicted")  # its file is closed before the loop's next turn
        self.open += 1
        self._open_by_client[client] = self._open_by_client.get(client, 0) + 1
        return True

    def release(self, client: str | None) -> None:
        self.open -= 1
        remaining = self._open_by_client[client] - 1
        if remaining:
            self._open_by_client[client] = remaining
        else:
            del self._open_by_client[client]

    def dropped(self, reason: str, detail: str) -> None:
        if self._events is not None:
            self._events.connection_dropped(reason)
        now = time.monotonic()
        if now - self._warned_at.get(reason, float("-inf")) >= WARNING_INTERVAL_SECONDS:
            self._warned_at[reason] = now
            logger.warning(
                "closing connections (%s): %s; counted in hourglass_connections_dropped_total, "
                "logged at most every %g s",
                reason,
                detail,
                WARNING_INTERVAL_SECONDS,
            )


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol under a ConnectionGuard: admitted or refused when it
    opens, closed when a request head does not arrive in time."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard
        self._client_host: str | None = None
        self._admitted = False
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        peer = transport.get_extra_info("peername")
        self._client_host = peer[0] if isinstance(peer, tuple) else None
        if not self._guard.admit(self._client_host):
            transport.close()
            return
        self._admitted = True
        super().connection_made(transport)
        self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self._admitted:
            return  # refused: uvicorn never saw it
        self._admitted = False
        self._stop_waiting_for_head()
        self._guard.release(self._client_host)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._stop_waiting_for_head()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        next_request_parsed = bool(self.pipeline)
        super().on_response_complete()
        if not next_request_parsed and not self.transport.is_closing():
            self._await_head()

    def drop(self, reason: str) -> None:
        """Close this connection, which waits for a request head."""
        self._stop_waiting_for_head()
        self._guard.dropped(reason, f"a connection from {self._client_host}")
        self.transport.close()

    def _await_head(self) -> None:
        self._head_deadline = self.loop.call_later(
            self._guard.limits.head_timeout, self.drop, "head_timeout"
        )
        self._guard.waiting_for_head[self] = None

    def _stop_waiting_for_head(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None
            del self._guard.waiting_for_head[self]


class HourglassServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        stopping: Callable[[], None],
        limits: ConnectionLimits,
        events: ConnectionEvents | None = None,
    ) -> None:
        super().__init__(config)
        self._stopping = stopping
        self._loop: asyncio.AbstractEventLoop | None = None
        self.connection_guard = ConnectionGuard(limits, events)
        config.http = functools.partial(GuardedHttpProtocol, guard=self.connection_guard)
        # No WebSocket routes; an upgrade would hand the connection to another protocol
        # behind the guard's back.
        config.ws = "none"

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        guard = self.connection_guard
        guard.capacity = fit_to_open_files(guard.limits.max_connections, raise_open_file_limit())
        logger.info(
            "connections: at most %d (%s per client); request heads within %g s",
            guard.capacity,
            guard.limits.max_per_client or "no cap",
            guard.limits.head_timeout,
        )
        await super().startup(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and not self._loop.is_closed():
            # From a signal handler (or another thread): run it on the loop, safely.
            self._loop.call_soon_threadsafe(self._stopping)
