"""The floor of the stack: an empty poll and a new-key offer with nothing but our stack.

FastAPI with one route per operation, each reading the raw `Request` through a
cached pydantic `TypeAdapter` of the service's own request model, awaiting one of
the service's statements (bench/hourglass.py's CLAIM_ONE, CLAIM_MANY and OFFER,
held to the service by tests/bench/test_ceiling_statements.py) on a
`psycopg_pool.AsyncConnectionPool` of autocommit connections, and answering as
the service answers; around the router, ServerErrorMiddleware, one pure ASGI layer
(a request id, a counter, a histogram), ExceptionMiddleware and FastAPI's
AsyncExitStackMiddleware, as the service's own stack (app/api/edge.py) minus its
body bounds. What Hourglass spends beyond this is what its own code adds
(its figures are in bench/RESULTS.md):

    HOURGLASS_FLOOR_DSN=postgresql://root@127.0.0.1:5432/hourglass_probe \\
        uvicorn bench.floor:app --port 8183 --no-access-log --loop uvloop --http httptools

Left out, as work that is not this floor's: waiting polls (a `wait` claims once),
queue settings (delivery limits, dead letters: the statement for a queue without a
limit), updating or ignoring an existing key (the insert finds the key taken, and
the answer says `ignored`), and problem+json details of a 422.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, Response
from fastapi.middleware.asyncexitstack import AsyncExitStackMiddleware
from prometheus_client import CollectorRegistry, Counter, Histogram
from psycopg_pool import AsyncConnectionPool
from pydantic import TypeAdapter, ValidationError
from starlette.middleware.errors import ServerErrorMiddleware
from starlette.middleware.exceptions import ExceptionMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.schemas.locks import PollRequest
from app.api.schemas.messages import PutMessage
from app.config import Settings
from app.domain.formats import KEY_PATTERN, QUEUE_PATTERN, format_timestamp
from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES
from app.domain.payloads import encode_payload
from app.domain.rendering import delivery_tail, json_string, object_pieces
from app.domain.trace import trace_of_headers
from app.storage.statements.leases import PAYLOAD_READ_BYTES
from bench.hourglass import CLAIM_MANY, CLAIM_ONE, MAX_POLL_BYTES, OFFER, SESSION_OPTIONS

DSN_VARIABLE = "HOURGLASS_FLOOR_DSN"
DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/hourglass_probe"
POOL_SIZE_VARIABLE = "HOURGLASS_FLOOR_POOL_SIZE"
# The service's defaults, as `hourglass serve` runs without settings.
POOL_SIZE = Settings.model_fields["pool_size"].default
DEFAULT_LEASE_MS = round(Settings.model_fields["default_lease"].default * 1000)
MAX_PAYLOAD_BYTES = Settings.model_fields["max_payload_bytes"].default

_poll_request = TypeAdapter(PollRequest)
_put_message = TypeAdapter(PutMessage)
_DEFAULT_POLL = PollRequest()
_queue_name = re.compile(QUEUE_PATTERN).fullmatch
_message_key = re.compile(KEY_PATTERN).fullmatch
_EMPTY_POLL = b'{"lock_id":null,"messages":[]}'
_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
# The payloads a poll of many left out (larger than PAYLOAD_READ_BYTES together).
_PAYLOADS = "SELECT id, payload FROM delayed_queue WHERE id = ANY(%(ids)s)"


class FloorEdge:
    """Pure ASGI: every HTTP request gets an `x-request-id` header on its answer, and is
    counted and timed by method, route template and status."""

    def __init__(self, app: ASGIApp, counter: Counter, histogram: Histogram) -> None:
        self.app = app
        self.counter = counter
        self.histogram = histogram

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        id_header = (b"x-request-id", os.urandom(16).hex().encode())
        status = 500  # if the app fails before answering

        async def edge_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), id_header]
            await send(message)

        try:
            await self.app(scope, receive, edge_send)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            labels = (scope["method"], route, str(status))
            self.counter.labels(*labels).inc()
            self.histogram.labels(*labels).observe(time.perf_counter() - started)


class FloorApi(FastAPI):
    """FastAPI with the service's four layers around the router (app/api/edge.py), its
    own body bounds and error handlers left out, and no telemetry of FastAPI's."""

    def __init__(self, **options: Any) -> None:
        super().__init__(telemetry={"tracing": False, "metrics": False, "logs": False}, **options)
        self.registry = CollectorRegistry()  # its own: several apps in one process
        labels = ["method", "route", "status"]
        self.requests = Counter("floor_requests", "Requests", labels, registry=self.registry)
        self.durations = Histogram(
            "floor_request_duration_seconds", "Requests by route", labels, registry=self.registry
        )

    def build_middleware_stack(self) -> ASGIApp:
        app: ASGIApp = AsyncExitStackMiddleware(self.router)
        app = ExceptionMiddleware(app, debug=self.debug)
        app = FloorEdge(app, self.requests, self.durations)
        return ServerErrorMiddleware(app, debug=self.debug)


def create_app(dsn: str | None = None, pool_size: int | None = None) -> FloorApi:
    """The floor's app on `dsn` (default: $HOURGLASS_FLOOR_DSN, else DEFAULT_DSN), read
    when it starts; its pool of `pool_size` connections is opened in the lifespan."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        size = pool_size or int(os.environ.get(POOL_SIZE_VARIABLE, POOL_SIZE))
        pool = AsyncConnectionPool(
            dsn or os.environ.get(DSN_VARIABLE, DEFAULT_DSN),
            min_size=size,
            max_size=size,
            # As the service's sessions and the ceiling's (bench/hourglass.py).
            kwargs={"autocommit": True, "options": SESSION_OPTIONS},
            open=False,
        )
        await pool.open(wait=True)
        app.state.pool = pool
        try:
            yield
        finally:
            await pool.close()

    app = FloorApi(title="Hourglass's floor", lifespan=lifespan, docs_url=None, redoc_url=None)
    app.add_api_route("/v1/queues/{queue}/poll", poll, methods=["POST"])
    app.add_api_route("/v1/queues/{queue}/messages/{key:path}", offer, methods=["PUT"])
    return app


async def poll(request: Request) -> Response:
    """`POST /v1/queues/{queue}/poll`: lease up to `max` due messages, as the service does."""
    queue = request.path_params["queue"]
    body = await request.body()
    try:
        asked = _poll_request.validate_json(body) if body else _DEFAULT_POLL
    except ValidationError as error:
        return _unprocessable(error)
    if not _queue_name(queue):
        return _unprocessable(None)
    now = time.time_ns() // 1_000_000
    lock_id = str(uuid.uuid4())
    lease_ms = DEFAULT_LEASE_MS if asked.lease is None else round(asked.lease * 1000)
    parameters: dict[str, Any] = {
        "queue": queue,
        "now": now,
        "limit": asked.max,
        "lock_id": lock_id,
        "lease_until": now + lease_ms,
        "deliveries_1": 1,
    }
    if asked.max > 1:  # with the running sums that bound the answer
        statement = CLAIM_MANY
        parameters["payload_bytes_1"] = POLL_MESSAGE_ENVELOPE_BYTES
        parameters["payloads_bytes_1"] = PAYLOAD_READ_BYTES
        parameters["max_bytes"] = MAX_POLL_BYTES
    else:
        statement = CLAIM_ONE
        parameters["payload_bytes_1"] = PAYLOAD_READ_BYTES
    pool: AsyncConnectionPool = request.app.state.pool
    async with pool.connection() as connection:
        cursor = await connection.execute(statement, parameters)
        rows = await cursor.fetchall()
        if not rows:
            return Response(_EMPTY_POLL, media_type="application/json")
        left_out = [row[0] for row in rows if row[2] is None]
        payloads: dict[int, bytes] = {}
        if left_out:
            cursor = await connection.execute(_PAYLOADS, {"ids": left_out})
            payloads = dict(await cursor.fetchall())
    return Response(
        b"".join(_poll_answer(queue, lock_id, now + lease_ms, rows, payloads)),
        media_type="application/json",
    )


async def offer(request: Request) -> Response:
    """`PUT /v1/queues/{queue}/messages/{key}`: a new key's message, `201`."""
    queue, key = request.path_params["queue"], request.path_params["key"]
    try:
        asked = _put_message.validate_json(await request.body())
    except ValidationError as error:
        return _unprocessable(error)
    if not (_queue_name(queue) and _message_key(key)):
        return _unprocessable(None)
    now = time.time_ns() // 1_000_000
    scheduled_at = asked.when().resolve(now)
    trace = trace_of_headers(request.scope["headers"])
    pool: AsyncConnectionPool = request.app.state.pool
    async with pool.connection() as connection:
        cursor = await connection.execute(
            OFFER,
            {
                "pKey": key,
                "pKind": queue,
                "payload": encode_payload(asked.payload, MAX_PAYLOAD_BYTES),
                "scheduledAt": scheduled_at,
                "scheduledAtInitially": scheduled_at,
                "createdAt": now,
                "priority": asked.priority,
                "messageGroup": asked.group,
                "expiresAt": asked.when().expiry(scheduled_at),
                "trace": None if trace is None else trace.stored(),
            },
        )
        created = await cursor.fetchone() is not None
    answer = {
        "queue": queue,
        "key": key,
        "outcome": "created" if created else "ignored",
        "scheduled_at": format_timestamp(scheduled_at),
    }
    return Response(
        _compact(answer).encode(),
        status_code=201 if created else 200,
        media_type="application/json",
    )


def _poll_answer(
    queue: str,
    lock_id: str,
    lease_until: int,
    rows: Sequence[tuple[Any, ...]],
    payloads: dict[int, bytes],
) -> list[bytes]:
    """The service's poll answer (app/api/rendering.py) for claimed `rows`, in its order."""
    # id, key, payload, payload bytes, previous due time, due time asked for, created,
    # previous lock, previous deliveries, first and last delivered, dead-lettered from,
    # priority: CLAIM_ONE's and CLAIM_MANY's RETURNING.
    ordered = sorted(rows, key=lambda row: (-row[12], row[4], row[0]))
    pieces = [f'{{"lock_id":{json_string(lock_id)},"messages":['.encode()]
    lease_end = format_timestamp(lease_until)
    for number, row in enumerate(ordered):
        origin = row[11]
        if number:
            pieces.append(b",")
        pieces += object_pieces(
            f'"queue":{json_string(queue)},"key":{json_string(row[1])}',
            row[2] if row[2] is not None else payloads[row[0]],
            f'"scheduled_at":"{lease_end}"'
            f',"scheduled_at_initially":"{format_timestamp(row[5])}"'
            f',"created_at":"{format_timestamp(row[6])}","state":"leased"'
            f',"deliveries":{row[8] + 1}'
            f',"dead_lettered_from":{"null" if origin is None else json_string(origin)}'
            f',"priority":{row[12]}' + delivery_tail(row[4] != row[5], lease_until),
        )
    pieces.append(b"]}")
    return pieces


def _unprocessable(error: ValidationError | None) -> Response:
    detail = "invalid path" if error is None else error.errors(include_url=False)[0]["msg"]
    return Response(
        _compact({"title": "Unprocessable Entity", "status": 422, "detail": detail}).encode(),
        status_code=422,
        media_type="application/problem+json",
    )


app = create_app()
