"""What a request body may cost: at most so many bytes (413), arriving in so much time (408).

Each is one problem type however the body arrives: a body declared too large by its
Content-Length is refused before it is read, one sent in chunks (or longer than
declared) while it is read; either way it is `request-too-large`. The time is kept
by the server (app/server.py), which marks a request whose body is late.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import ProblemError, problem_from

REQUEST_TOO_LARGE = "request-too-large"
REQUEST_TIMEOUT = "request-timeout"
# Set to True in a request's scope by the server once its body is late.
BODY_LATE = "hourglass.body_late"


class RequestBodyLimits:
    """Refuse bodies over `max_bytes` (413), and bodies the server marked late (408; the
    server closes the connection after it: the rest of such a body is not worth reading)."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

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

        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                # Raised inside the body read: the app's error handlers render them.
                if received > self.max_bytes:
                    raise self._too_large()
                if message.get("more_body") and scope.get(BODY_LATE):
                    raise ProblemError(
                        408, "the request body did not arrive in time", slug=REQUEST_TIMEOUT
                    )
            return message

        await self.app(scope, limited_receive, send)
