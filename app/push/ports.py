"""What the push dispatcher reports as it works (the app's metrics listen)."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol


class PushResult(StrEnum):
    """How one push request ended: the answer's status class, or no answer."""

    SUCCESS = "2xx"
    REDIRECT = "3xx"
    CLIENT_ERROR = "4xx"
    SERVER_ERROR = "5xx"
    TIMEOUT = "timeout"
    ERROR = "error"  # no answer: connection refused or reset, TLS, a malformed answer

    @classmethod
    def of_status(cls, status: int) -> PushResult:
        """The result of an answer with HTTP status `status`."""
        return {2: cls.SUCCESS, 3: cls.REDIRECT, 4: cls.CLIENT_ERROR, 5: cls.SERVER_ERROR}.get(
            status // 100, cls.ERROR
        )


class PushEvents(Protocol):
    def pushed(self, queue: str, result: PushResult, seconds: float) -> None:
        """One request to `queue`'s endpoint ended with `result` after `seconds`."""
        ...

    def error(self, kind: str) -> None:
        """A failure of the dispatcher itself (`push_refresh`, `push_claim`, `push_settle`)."""
        ...


class Unobserved:
    """Events nobody listens to."""

    def pushed(self, queue: str, result: PushResult, seconds: float) -> None:
        pass

    def error(self, kind: str) -> None:
        pass
