"""A request id for every request: the client's `X-Request-ID` if it sent a sane one, else new.

It is returned as `X-Request-ID` and attached to every log line written while the
request is handled (app/logs.py), so a client's complaint can be found in the logs.
The request's layer (app/api/edge.py) sets and echoes it.
"""

from __future__ import annotations

import os
import re
from contextvars import ContextVar

from starlette.types import Scope

current_request_id: ContextVar[str | None] = ContextVar("current_request_id", default=None)

HEADER = b"x-request-id"
# What we accept from a client: short, printable, no spaces (it goes into logs).
_ACCEPTABLE = re.compile(rb"[!-~]{1,128}")


def request_id_of(scope: Scope) -> str:
    """The id of the request `scope` describes: the client's, if sane, else a new one."""
    offered = next((value for name, value in scope["headers"] if name == HEADER), None)
    if offered and _ACCEPTABLE.fullmatch(offered):
        return offered.decode()
    return os.urandom(16).hex()  # as random as uuid4().hex, without building a UUID
