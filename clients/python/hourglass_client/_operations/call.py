"""A call: one request and how its answer is read, and the pieces operations build it from."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

T = TypeVar("T")

_NO_BODY: Any = object()


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and the reading of its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = _NO_BODY
    params: dict[str, str | int] = field(default_factory=dict)
    # Safe to send again when a `503` says it was not done, or its answer was lost:
    # repeating it changes nothing a first success would not have (docs/guide/workers.md, "Retries").
    repeatable: bool = False
    # Statuses besides 2xx that `parse` reads (an acknowledgement's 404: nothing held).
    accept: frozenset[int] = frozenset()
    # Seconds the service may hold the request before answering (a long poll's wait).
    wait: float = 0.0
    # An offer: sent with the current trace context's headers, if any (_tracing.py).
    traced: bool = False

    @property
    def has_body(self) -> bool:
        return self.json is not _NO_BODY


def segment(value: str) -> str:
    """`value` as one path segment: `/`, `%`, `?`… encoded, and `.`/`..` kept from meaning a
    directory (a key may be any of these)."""
    quoted = quote(value, safe="")
    if quoted.strip(".") == "":
        quoted = quoted.replace(".", "%2E")
    return quoted


def queue_path(queue: str, *parts: str) -> str:
    return "/".join(("/v1/queues", segment(queue), *parts))


def read_json(reader: Callable[[dict[str, Any]], T]) -> Callable[[httpx.Response], T]:
    return lambda response: reader(response.json())


def read_nothing(_response: httpx.Response) -> None:
    return None


def read_found(response: httpx.Response) -> bool:
    return response.status_code != 404


def present(**fields: Any) -> dict[str, Any]:
    """The fields that were given (not None)."""
    return {name: value for name, value in fields.items() if value is not None}
