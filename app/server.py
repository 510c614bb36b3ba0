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
can be answered reliably before the head is whole), and each request's body within
`body_timeout` of its head, else the app answers 408 (app/api/limits.py) and the
connection is closed. Connections are capped per client address and in all, the
total fitted under the process's open-file limit (its soft limit raised to the hard
one first) so that accepting never runs out of files. At the total cap, a new
connection takes the place of the one that has waited longest for a request head
(idle or trickling), or else for a request body; only when none waits (every open
connection has a request in the app's hands) is it refused. Decision 11 says why.
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
from typing import Any, Protocol, cast

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from app.api.limits import BODY_LATE
from app.config import Settings

logger = logging.getLogger(__name__)

# Open files kept back from client connections: the database pool (up to three files
# per connection: SQLite's database, WAL and shared memory), logs, the event loop,
# listening sockets, a connection being refused. A tenth of the limit, and at least
# 64 besides the pool's: 1,024 files with the default pool of 10 leave 922 connections.
MIN_RESERVED_FILES = 64
FILES_PER_POOLED_CONNECTION = 3
# A refused or closed connection is logged at most this often per reason.
WARNING_INTERVAL_SECONDS = 60.0


class ConnectionEvents(Protocol):
    """What the guard reports (app.metrics.Metrics implements it)."""

    def connection_dropped(self, reason: str) -> None: ...

    def watch_connections(self, open_connections: Callable[[], int]) -> None: ...


@dataclass(frozen=True)
class ConnectionLimits:
    head_timeout: float
    body_timeout: float
    max_connections: int
    max_per_client: int  # 0: no cap per client
    pool_size: int  # database connections, whose files are kept back

    @classmethod
    def from_settings(cls, settings: Settings) -> ConnectionLimits:
        return cls(
            head_timeout=settings.request_head_timeout,
            body_timeout=settings.request_body_timeout,
            max_connections=settings.max_connections,
            max_per_client=settings.max_connections_per_client,
            pool_size=settings.pool_size,
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


def fit_to_open_files(max_connections: int, open_files: int, pool_size: int) -> int:
    """The connection cap that leaves the process its reserve of open files."""
    reserved = max(MIN_RESERVED_FILES + FILES_PER_POOLED_CONNECTION * pool_size, open_files // 10)
    return max(1, min(max_connections, open_files - reserved))


class ConnectionGuard:
    """Admits connections under the caps, and knows which wait for a request's head or body.

    Deadlines are checked on uvicorn's tick (every 0.1 s) rather than by a timer per
    request: a request then costs a few dict operations. Each waiting dict keeps
    insertion order, which is deadline order (one timeout for all), so a check looks
    only at the expired entries and the first one still waiting.
    """

    def __init__(self, limits: ConnectionLimits, events: ConnectionEvents | None) -> None:
        self.limits = limits
        self.capacity = limits.max_connections
        self.open = 0
        self._open_by_client: dict[str | None, int] = {}
        # Connection -> the loop time by which its request's head, or body, must be whole.
        self.waiting_for_head: dict[GuardedHttpProtocol, float] = {}
        self.waiting_for_body: dict[GuardedHttpProtocol, float] = {}
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
            # The longest waiting for a head (idle or trickling) gives way first, then the
            # longest waiting for a body: neither has a request the app is working on.
            oldest = next(iter(self.waiting_for_head), None) or next(
                iter(self.waiting_for_body), None
            )
            if oldest is None:
                self.dropped("server_cap", f"{self.open} connections open, none waiting")
                return False
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

    def enforce_deadlines(self, now: float) -> None:
        """Drop connections whose head is late; mark requests whose body is late."""
        for waiting, expire in (
            (self.waiting_for_head, GuardedHttpProtocol.head_late),
            (self.waiting_for_body, GuardedHttpProtocol.body_late),
        ):
            while waiting:
                connection, deadline = next(iter(waiting.items()))
                if deadline > now:
                    break
                del waiting[connection]
                expire(connection)

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
    opens, watched while it waits for a request's head or body."""

    def __init__(self, *args: Any, guard: ConnectionGuard, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._guard = guard
        self._client_host: str | None = None
        self._admitted = False

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
        self._guard.waiting_for_head.pop(self, None)
        self._guard.waiting_for_body.pop(self, None)
        self._guard.release(self._client_host)
        super().connection_lost(exc)

    def on_headers_complete(self) -> None:
        self._guard.waiting_for_head.pop(self, None)
        # A pipelined request (one in flight before it) starts later: so does its body's clock.
        pipelined = self.cycle is not None and not self.cycle.response_complete
        super().on_headers_complete()
        if not pipelined:
            self._await_body()

    def on_message_complete(self) -> None:
        self._guard.waiting_for_body.pop(self, None)
        super().on_message_complete()

    def on_response_complete(self) -> None:
        # Whatever of a body the app left unread, the next head's deadline now bounds it.
        self._guard.waiting_for_body.pop(self, None)
        next_request_parsed = bool(self.pipeline)
        super().on_response_complete()
        if self.transport.is_closing():
            return
        if not next_request_parsed:
            self._await_head()
        elif self.cycle.more_body:  # the last parsed request; any before it came whole
            self._await_body()

    def head_late(self) -> None:
        self.drop("head_timeout")

    def body_late(self) -> None:
        """The app answers 408 (app/api/limits.py), then the connection closes."""
        self._guard.dropped("body_timeout", f"a request from {self._client_host}")
        self.cycle.scope[BODY_LATE] = True  # type: ignore[literal-required]
        self.cycle.keep_alive = False
        self.cycle.message_event.set()  # wakes a body read in progress

    def drop(self, reason: str) -> None:
        """Close this connection, which waits for a request's head or body."""
        self._guard.waiting_for_head.pop(self, None)
        self._guard.waiting_for_body.pop(self, None)
        self._guard.dropped(reason, f"a connection from {self._client_host}")
        self.transport.close()

    def _await_head(self) -> None:
        self._guard.waiting_for_head[self] = self.loop.time() + self._guard.limits.head_timeout

    def _await_body(self) -> None:
        self._guard.waiting_for_body[self] = self.loop.time() + self._guard.limits.body_timeout


class HourglassServer(uvicorn.Server):
    """uvicorn's Server with the app told of a stop at once, and its connections guarded."""

    # uvicorn says "Uvicorn running on …" only when it opens the sockets itself (its
    # workers' parent says it for theirs); `hourglass serve` binds its own, and says it.
    announce_sockets = False

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
        # uvicorn calls it as it would a protocol class.
        config.http = cast(Any, functools.partial(GuardedHttpProtocol, guard=self.connection_guard))
        # No WebSocket routes; an upgrade would hand the connection to another protocol
        # behind the guard's back.
        config.ws = "none"

    async def on_tick(self, counter: int) -> bool:
        self.connection_guard.enforce_deadlines(asyncio.get_running_loop().time())
        return await super().on_tick(counter)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        self._loop = asyncio.get_running_loop()
        guard = self.connection_guard
        guard.capacity = fit_to_open_files(
            guard.limits.max_connections, raise_open_file_limit(), guard.limits.pool_size
        )
        logger.info(
            "connections: at most %d (%s per client); request heads within %g s, bodies %g s",
            guard.capacity,
            guard.limits.max_per_client or "no cap",
            guard.limits.head_timeout,
            guard.limits.body_timeout,
        )
        await super().startup(sockets)
        if sockets is not None and self.announce_sockets:
            self._log_started_message(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        super().handle_exit(sig, frame)
        if self._loop is not None and not self._loop.is_closed():
            # From a signal handler (or another thread): run it on the loop, safely.
            self._loop.call_soon_threadsafe(self._stopping)


class CannotListen(Exception):
    """The address to serve on cannot be had: in use, not this machine's, not permitted."""


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to every address `host` resolves to, not yet listening, or CannotListen.

    Bound before anything else starts, so that a port in use or a host that is not this
    machine's stops the command before the database is touched; `listen` comes only when
    the server starts, so that nothing accepts connections while the database is waited
    for or migrated. Each socket is set up as asyncio's own `create_server` does.
    """
    where = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
    try:
        addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as error:
        raise CannotListen(f"cannot listen on {where} (--host): {_os_reason(error)}") from None
    sockets: list[socket.socket] = []
    try:
        for family, kind, protocol, _name, address in dict.fromkeys(addresses):
            listener = socket.socket(family, kind, protocol)
            sockets.append(listener)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            listener.bind(address)
    except OSError as error:
        close_sockets(sockets)
        raise CannotListen(
            f"cannot listen on {where} (--host, --port): {_os_reason(error)}"
        ) from None
    return sockets


def start_listening(sockets: list[socket.socket], backlog: int = 2048) -> None:
    """Listen on the bound sockets, or CannotListen (another server took the port since)."""
    for listener in sockets:
        try:
            listener.listen(backlog)
        except OSError as error:
            host, port = listener.getsockname()[:2]
            raise CannotListen(f"cannot listen on {host}:{port}: {_os_reason(error)}") from None


def close_sockets(sockets: list[socket.socket]) -> None:
    for listener in sockets:
        listener.close()


def _os_reason(error: OSError | UnicodeError) -> str:
    """`address already in use`, `Name or service not known`: the system's words."""
    if isinstance(error, OSError) and error.strerror:
        return error.strerror[0].lower() + error.strerror[1:]
    return str(error)
