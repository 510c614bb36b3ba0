"""What a request body may cost: at most so many bytes (413), arriving in so much time (408).

Each is one problem type however the body arrives: a body declared too large by its
Content-Length is refused before it is read, one sent in chunks (or longer than
declared) while it is read; either way it is `request-too-large`. The time is kept
by the server (app/server.py), which marks a request whose body is late.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.types import Message, Receive, Scope

from app.api.errors import ProblemError

REQUEST_TOO_LARGE = "request-too-large"
REQUEST_TIMEOUT = "request-timeout"
# Set to True in a request's scope by the server once its body is late.
BODY_LATE = "hourglass.body_late"


class BodyLimits:
    """Bodies over `max_bytes` are refused (413), and bodies the server marked late (408;
    the server closes the connection after it: the rest of such a body is not worth
    reading). The request's layer (app/api/edge.py) asks it of every HTTP request."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes

    def too_large(self) -> ProblemError:
        return ProblemError(
            413, f"request body is larger than {self.max_bytes} bytes", slug=REQUEST_TOO_LARGE
        )

    def declared_too_large(self, scope: Scope) -> bool:
        """Whether the request's Content-Length alone says its body is too large."""
        declared = Headers(scope=scope).get("content-length")
        return declared is not None and declared.isdigit() and int(declared) > self.max_bytes

    def limited(self, scope: Scope, receive: Receive) -> Receive:
        """`receive`, raising the 413 or 408 as the body arrives (inside the body read: the
        app's error handlers render them)."""
        received = 0
        max_bytes = self.max_bytes

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise self.too_large()
                if message.get("more_body") and scope.get(BODY_LATE):
                    raise ProblemError(
                        408, "the request body did not arrive in time", slug=REQUEST_TIMEOUT
                    )
            return message

        return limited_receive
