"""What every benchmarked system offers the workloads: Hourglass over HTTP, its raw-SQL
ceiling, and the peers (pgmq, pgqueuer, procrastinate) all implement `Target`.

A workload opens one `Worker` per concurrent client (one HTTP connection, or one
database connection) and drives it from a single asyncio event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

# About 100 bytes of JSON, the same for every system.
PAYLOAD = b'{"user":123456,"text":"' + b"x" * 70 + b'"}'


class Worker(Protocol):
    """One concurrent client: one connection, used by one task at a time."""

    async def offer(self, key: str, payload: bytes) -> None:
        """Schedule one message, due now, under `key` (peers without keys may ignore it)."""

    async def offer_batch(self, keys: Sequence[str], payload: bytes) -> None:
        """Schedule len(keys) messages, due now, in one call."""

    async def take(self, limit: int) -> Sequence[Any]:
        """Lease (or dequeue) up to `limit` due messages; [] when nothing is due."""

    async def finish(self, taken: Sequence[Any]) -> None:
        """Acknowledge (delete or complete) what one `take` returned."""

    async def close(self) -> None: ...


class Target(Protocol):
    name: str
    # Largest `take` limit this system supports (procrastinate fetches one job at a time).
    max_take: int

    async def setup(self) -> None:
        """Install the system's schema and queue in the bench database (idempotent)."""

    async def clear(self) -> None:
        """Empty the queue and VACUUM its tables, so each workload starts fresh."""

    async def prefill(self, count: int, payload: bytes, due_in_seconds: float = 0.0) -> None:
        """Put `count` messages in the queue as fast as the system allows (not measured)."""

    async def worker(self) -> Worker: ...

    async def close(self) -> None: ...
