"""A request id for every request: the client's `X-Request-ID` if it sent a sane one, else new.

It is returned as `X-Request-ID` and attached to every log line written while the
request is handled (app/logs.py), so a client's complaint can be found in the logs.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

current_request_id: ContextVar[str | None] = ContextVar("current_request_id", default=None)

_HEADER = b"x-request-id"
# What we accept from a client: short, printable, no spaces (it goes into logs).
_ACCEPTABLE = re.compile(rb"[!-~]{1,128}")


class RequestId:
    """ASGI middleware: sets `current_request_id` and echoes it on the response."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        offered = next((value for name, value in scope["headers"] if name == _HEADER), None)
        request_id = (
            offered.decode() if offered and _ACCEPTABLE.fullmatch(offered) else uuid.uuid4().hex
        )
        token = current_request_id.set(request_id)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (_HEADER, request_id.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request_id.reset(token)
