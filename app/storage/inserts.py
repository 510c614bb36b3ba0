"""Inserts: new messages inserted unless their key exists, many rows per statement, in
chunks the database takes; shared by the offers and by cron, which installs its runs as
messages."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from app.domain.messages import Offer
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.runner import chunks

# Rows per multi-row INSERT of a batch: at most 200 (docs/decisions/0004-batch-offers.md).
INSERT_CHUNK = 200


class Inserts:
    """New messages inserted unless their key exists, many rows per statement (offers
    and cron runs); the groups of grouped ones marked for the groups' keeper in the same
    transaction (docs/decisions/0027-message-groups.md)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        self.offer_insert = dialect.statements.messages.offer_insert
        self.group_mark = dialect.statements.groups.group_mark
        self.groups_mark = dialect.statements.groups.groups_mark

    async def one(self, connection: Connection, queue: str, offer: Offer, now: int) -> bool:
        """INSERT unless the key exists; whether it went in. A grouped message needs the
        caller's transaction (see `mark`)."""
        inserted = await connection.execute(self.offer_insert, offer_row(queue, offer, now))
        went_in = inserted.first() is not None
        if went_in and offer.group is not None:
            await self.mark(connection, queue, [offer.group])
        return went_in

    async def many(
        self, connection: Connection, queue: str, offers: Sequence[Offer], now: int
    ) -> Sequence[str]:
        """INSERT those of `offers` (one chunk, distinct keys) whose keys are free; their keys.
        Grouped messages need the caller's transaction (see `mark`)."""
        keys = await self.dialect.insert_many(
            connection, self.offer_insert, [offer_row(queue, offer, now) for offer in offers]
        )
        if any(offer.group is not None for offer in offers):
            went_in = set(keys)
            await self.mark(
                connection,
                queue,
                [offer.group for offer in offers if offer.key in went_in and offer.group],
            )
        return keys

    async def mark(self, connection: Connection, queue: str, groups: Iterable[str]) -> None:
        """Mark `groups` of `queue` for the keeper, once each, in the transaction that
        inserted their messages (waiting, until the keeper brings them to the front)."""
        marked = sorted(set(groups))
        if not marked:
            return
        if self.groups_mark is not None:  # one statement
            await connection.execute(self.groups_mark, {"queue": queue, "groups": marked})
        else:  # one statement sent with every group
            rows = [{"queue": queue, "group": group} for group in marked]
            await connection.execute(self.group_mark, rows)

    def chunks(self, offers: Sequence[Offer]) -> Iterator[Sequence[Offer]]:
        """`offers` in chunks of INSERT_CHUNK, each smaller than the dialect's statement
        limit where it has one."""
        return sized_chunks(offers, INSERT_CHUNK, self.dialect.max_statement_bytes)


def sized_chunks(
    offers: Sequence[Offer], rows: int, max_bytes: int | None
) -> Iterator[Sequence[Offer]]:
    """`offers` in chunks of at most `rows`, each under `max_bytes` where given (payloads
    counted twice: a text protocol escapes them), a chunk at least one offer."""
    if max_bytes is None:
        yield from chunks(offers, rows)
        return
    start = 0
    while start < len(offers):
        end, size = start, 0
        while end < len(offers) and end - start < rows:
            size += 2 * len(offers[end].payload) + 1024  # the row's other values, roughly
            if size > max_bytes and end > start:
                break
            end += 1
        yield offers[start:end]
        start = end


def offer_row(queue: str, offer: Offer, now: int) -> dict[str, Any]:
    return {
        "pKey": offer.key,
        "pKind": queue,
        "payload": offer.payload,
        "scheduledAt": offer.scheduled_at,
        "scheduledAtInitially": offer.scheduled_at,
        "createdAt": now,
        "priority": offer.stored_priority,
        "messageGroup": offer.group,
        "expiresAt": offer.expires_at,
        "trace": None if offer.trace is None else offer.trace.stored(),
    }
