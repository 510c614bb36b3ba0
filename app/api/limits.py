"""What a request body may cost: at most so many bytes (413), arriving within so many seconds (408).

Both are answered as problem+json of one type each, however the body arrives: a
too-large body declared by its Content-Length is refused before it is read, one
sent in chunks (or longer than declared) while it is read; either way it is
`request-too-large`.
"""

from __future__ import annotations

import asyncio

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import ProblemError, problem_from

REQUEST_TOO_LARGE = "request-too-large"
REQUEST_TIMEOUT = "request-timeout"


class RequestBodyLimits:
    """Refuse bodies over `max_bytes` (413) and bodies still arriving `timeout` seconds after
    the request's head (408, then the connection is closed).

    The clock runs only while the app waits for more of the body: once the body is
    complete, nothing here bounds the request (a long poll waits as long as it asks).
    """

    def __init__(self, app: ASGIApp, max_bytes: int, timeout: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout = timeout

    def _too_large(self) -> ProblemError:
        return ProblemError(
            413, f"request body is larger than {self.max_bytes} bytes", slug=REQUEST_TOO_LARGE
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await problem_from(self._too_large())(scope, receive, send)
            return

        deadline = asyncio.get_running_loop().time() + self.timeout
        received = 0
        complete = False

        async def limited_receive() -> Message:
            nonlocal received, complete
            if complete:
                # Only a disconnect can come now; whoever listens for it may wait.
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                # `Connection: close` makes uvicorn close the connection once this is sent:
                # the rest of a body this late is not worth reading.
                raise ProblemError(
                    408,
                    f"request body did not arrive within {self.timeout:g} s",
                    slug=REQUEST_TIMEOUT,
                    headers={"Connection": "close"},
                ) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    # Raised inside the body read: the app's error handlers render it.
                    raise self._too_large()
                complete = not message.get("more_body", False)
            else:
                complete = True
            return message

        await self.app(scope, limited_receive, send)
