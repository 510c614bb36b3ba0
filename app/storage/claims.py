"""A poll's claim as the leases room and the dialects share it: the row it returns
(`ClaimedRow`), how many rows its answer takes (`answer_length`, lists' pages too), how it
runs where the database has no `UPDATE … RETURNING`, and the payloads read after it.

Not statements (those are app/storage/statements/leases.py): the row type follows the
claim's columns, and the rest runs the statements it is given; here, below the rooms and
the dialects, both of which use them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from sqlalchemy.sql import Select

from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES
from app.domain.trace import RENDERED_PER_STORED
from app.storage.connection import Connection
from app.storage.statements.leases import PAYLOAD_READ_BYTES


@dataclass(frozen=True, slots=True)
class ClaimedRow:
    """A row taken by a poll, with what the poll set (`scheduledAt`, the lock and the
    delivery counts) as it was before.

    `payload` is None until read (see read_payloads); `payload_bytes` is its length."""

    id: int
    key: str
    payload: bytes | None
    payload_bytes: int
    previous_scheduled_at: int
    scheduled_at_initially: int
    created_at: int
    previous_lock_id: str | None
    previous_deliveries: int
    previous_first_delivered_at: int | None
    previous_last_delivered_at: int | None
    dead_lettered_from: str | None
    priority: int
    group: str | None = None
    expires_at: int | None = None
    # As stored: app/domain/trace.py, Trace.of_stored.
    trace: str | None = None

    def delivered(self, max_deliveries: int | None) -> bool:
        """Whether a poll in a queue with that delivery limit (None: none) delivers this
        row, rather than holding it to dead-letter."""
        return max_deliveries is None or self.previous_deliveries < max_deliveries

    def answer_bytes(self, max_deliveries: int | None) -> int:
        """What the row adds to the answer of a poll in a queue with that delivery limit,
        at most: its payload and the fields around it, or nothing when it is not delivered."""
        if not self.delivered(max_deliveries):
            return 0
        return message_bytes(self.payload_bytes, self.trace)


def message_bytes(payload_bytes: int, trace: str | None) -> int:
    """What a message adds to a poll's answer (or a list's page), at most, by its payload's
    length and its stored trace context: the payload, the fields around it
    (POLL_MESSAGE_ENVELOPE_BYTES) and the trace context's rendering. The PostgreSQL
    dialect says the same in SQL."""
    traced = 0 if trace is None else RENDERED_PER_STORED * len(trace)
    return payload_bytes + traced + POLL_MESSAGE_ENVELOPE_BYTES


def answer_length(sizes: Sequence[int], max_bytes: int) -> int:
    """How many of the rows of `sizes` (answer bytes each, in the claim's order:
    app/storage/statements/leases.py, CLAIM_ORDER) a poll takes:
    those whose answer up to and including them fits in `max_bytes`, and the first
    delivered one always (with any not delivered before it, which count 0). The
    PostgreSQL dialect says the same in SQL."""
    running = 0
    for taken, size in enumerate(sizes):
        running += size
        if running > max_bytes and running != size:
            return taken
    return len(sizes)


async def read_payloads(
    connection: Connection,
    statement: Select[Any],
    sized: Sequence[tuple[int, int]],
    parameters: dict[str, Any],
) -> dict[int, bytes]:
    """The payloads that `statement` (ids bound as "ids", and `parameters`) finds of the rows
    `sized` lists as (id, payload bytes), by id, read in results of about
    PAYLOAD_READ_BYTES."""
    payloads: dict[int, bytes] = {}
    start = 0
    while start < len(sized):
        end, size = start + 1, sized[start][1]
        while end < len(sized) and size + sized[end][1] <= PAYLOAD_READ_BYTES:
            size += sized[end][1]
            end += 1
        ids = [row_id for row_id, _ in sized[start:end]]
        found = await connection.execute(statement, {**parameters, "ids": ids})
        payloads.update((row.id, row.payload) for row in found)
        start = end
    return payloads


async def claim_select_then_update(
    connection: Connection, statements: SimpleNamespace, parameters: dict
) -> list[ClaimedRow]:
    """Poll for databases without `UPDATE … RETURNING`, in one transaction: select the
    candidates (the dialect's leases `statements`: claim_candidates), then update those
    whose answer fits (claim_update, or claim_update_limited). The select reads a candidate's
    payload when it is small enough that all of them fit in one read's
    PAYLOAD_READ_BYTES: every poll of small messages makes these two statements (as
    before the bound), and one cut short reads little for nothing; the store reads
    the other payloads after."""
    inline = {"inline_payload_bytes": PAYLOAD_READ_BYTES // parameters["limit"]}
    rows = [
        ClaimedRow(
            id=row.id,
            key=row.pKey,
            payload=row.payload,
            payload_bytes=row.payload_bytes,
            previous_scheduled_at=row.scheduledAt,
            scheduled_at_initially=row.scheduledAtInitially,
            created_at=row.createdAt,
            previous_lock_id=row.lockUuid,
            previous_deliveries=row.deliveries,
            previous_first_delivered_at=row.firstDeliveredAt,
            previous_last_delivered_at=row.lastDeliveredAt,
            dead_lettered_from=row.deadLetteredFrom,
            priority=row.priority,
            group=row.messageGroup,
            expires_at=row.expiresAt,
            trace=row.trace,
        )
        for row in await connection.execute(statements.claim_candidates, {**parameters, **inline})
    ]
    sizes = [row.answer_bytes(parameters.get("max_deliveries")) for row in rows]
    rows = rows[: answer_length(sizes, parameters["max_bytes"])]
    if not rows:
        return []
    limited = "max_deliveries" in parameters
    update = statements.claim_update_limited if limited else statements.claim_update
    await connection.execute(update, {**parameters, "ids": [row.id for row in rows]})
    return rows
