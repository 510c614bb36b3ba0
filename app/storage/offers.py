"""Offers: one message, a batch, or a bulk load (the import) created, updated or ignored by
key; single offers that arrive together share one statement."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

from app.domain.errors import StorageUnavailable
from app.domain.messages import (
    IfExists,
    Offer,
    OfferOutcome,
    Outcome,
    QueueFilter,
    every_queue,
    shown_priority,
)
from app.storage.coalescing import PATIENCE_SECONDS, Coalesced
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.inserts import INSERT_CHUNK, Inserts, offer_row, sized_chunks
from app.storage.runner import Runner, chunks

# Bytes a bulk transaction (the import's COPY and its INSERT … SELECT) carries at most, as
# sized_chunks counts them: 10,000 rows of 256 KiB payloads would be 2.5 GiB at once, past
# a statement's timeout and an executor's memory.
BULK_BYTES = 64 * 1024 * 1024
# Lost races on one key: an offer reads and writes again at most this often.
_OFFER_RACE_ATTEMPTS = 100


class Offers:
    """Messages offered by key: created, or updated by compare-and-swap, or ignored."""

    def __init__(self, runner: Runner, dialect: Dialect, inserts: Inserts) -> None:
        self.runner = runner
        self.dialect = dialect
        self.statements = dialect.statements.messages
        self.inserts = inserts
        # New messages offered one by one: those that arrive while one goes in share the
        # next statement (decision 23).
        self._insert = Coalesced(
            self._insert_together,
            self._insert_alone,
            lambda new: new[0],  # per queue
            PATIENCE_SECONDS,
        )

    async def offer(
        self,
        queue: str,
        offer: Offer,
        now: int,
        *,
        can_create: bool = True,
        may_use: QueueFilter = every_queue,
    ) -> OfferOutcome | None:
        """Create, update or ignore one message; None when `can_create` is off and it is missing.

        An update keeps a dead letter's origin only when `may_use` allows that queue."""
        self.dialect.check_payload(offer.payload)
        # Most offers create: one INSERT on its own, one round trip where the
        # database allows. Only an existing key needs the transaction below, and so
        # does a grouped message (its group is marked in the INSERT's transaction).
        if can_create and offer.group is None and await self._insert((queue, offer, now)):
            return OfferOutcome(Outcome.CREATED, offer.scheduled_at)

        async def store(connection: Connection) -> OfferOutcome | None:
            return await self._offer(connection, queue, offer, now, can_create, may_use)

        return await self.runner.transaction(store)

    async def _insert_alone(self, new: tuple[str, Offer, int]) -> bool:
        """INSERT one message unless its key exists, on its own; whether it went in."""

        async def insert(connection: Connection) -> bool:
            return await self.inserts.one(connection, *new)

        return await self.runner.autocommit(insert)

    async def _insert_together(self, news: Sequence[tuple[str, Offer, int]]) -> list[bool]:
        """`_insert_alone` for many callers' messages in one go; for each, in order. In
        pieces no larger than the dialect's statement limit, where it has one (MariaDB's
        packet), as a batch offer's: all in one transaction, one statement where it can."""
        rows = [offer_row(queue, offer, now) for queue, offer, now in news]
        sizes = [len(piece) for piece in self.inserts.chunks([offer for _, offer, _ in news])]

        async def insert(connection: Connection) -> list[bool]:
            went_in: list[bool] = []
            for size in sizes:
                piece = rows[len(went_in) : len(went_in) + size]
                went_in += await self.dialect.insert_offers(
                    connection, self.inserts.offer_insert, piece
                )
            return went_in

        if len(sizes) > 1:  # several statements: one transaction still
            return await self.runner.transaction(insert)
        return await self.runner.shared(insert)

    async def offer_many(
        self, queue: str, offers: Sequence[Offer], now: int, may_use: QueueFilter = every_queue
    ) -> list[Outcome]:
        """Offer many messages; outcomes in input order, a repeated key as if offered in sequence.

        The first occurrence of each key goes in with multi-row INSERTs that skip
        existing keys (decision 8: no SELECT of existing keys first). Of the keys
        that existed, those to update are read back in one SELECT per chunk: one
        whose payload and time are already stored is ignored, as a single offer
        would ignore it at the moment of that read. The rest take the one-by-one
        path of a single offer (and its rule for a dead letter's origin, by `may_use`).
        """
        return await self._offer_batch(queue, offers, now, may_use, self._insert_in_chunks)

    async def offer_bulk(
        self, queue: str, offers: Sequence[Offer], now: int, may_use: QueueFilter = every_queue
    ) -> list[Outcome]:
        """offer_many for bulk loads (the import), with the same outcomes, rows and counts.

        Only the first step differs where the dialect has a bulk path (PostgreSQL:
        COPY into a staging table, then one INSERT … SELECT … ON CONFLICT DO NOTHING
        RETURNING per `dialect.bulk_rows` first occurrences, decision 20): the keys
        it did not insert go on exactly as in offer_many. Elsewhere, offer_many.
        """
        if self.dialect.bulk_rows is None:
            return await self.offer_many(queue, offers, now, may_use)
        return await self._offer_batch(queue, offers, now, may_use, self._insert_in_bulk)

    async def _insert_in_chunks(self, queue: str, firsts: Sequence[Offer], now: int) -> set[str]:
        """Insert `firsts` (distinct keys) whose keys are free, INSERT_CHUNK rows a
        statement, each its own transaction; the keys that went in."""

        async def insert(connection: Connection, chunk: Sequence[Offer]) -> Sequence[str]:
            return await self.inserts.many(connection, queue, chunk, now)

        return await _inserted(self.inserts.chunks(firsts), insert, self._run_insert)

    async def _run_insert(
        self, piece: Sequence[Offer], work: Callable[[Connection], Awaitable[Sequence[str]]]
    ) -> Sequence[str]:
        """One statement of inserts on its own, or, with grouped messages (whose groups are
        marked after it), a transaction."""
        if any(offer.group is not None for offer in piece):
            return await self.runner.transaction(work)
        return await self.runner.autocommit(work)

    async def _insert_in_bulk(self, queue: str, firsts: Sequence[Offer], now: int) -> set[str]:
        """Insert `firsts` (distinct keys) whose keys are free through the dialect's bulk
        path, `dialect.bulk_rows` (and at most BULK_BYTES) a transaction; the keys that
        went in."""
        assert self.dialect.bulk_rows is not None  # offer_bulk checked

        async def insert(connection: Connection, chunk: Sequence[Offer]) -> Sequence[str]:
            keys = await self.dialect.insert_bulk(connection, queue, chunk, now)
            if any(offer.group is not None for offer in chunk):
                went_in = set(keys)
                groups = [offer.group for offer in chunk if offer.key in went_in and offer.group]
                await self.inserts.mark(connection, queue, groups)
            return keys

        async def run(
            piece: Sequence[Offer], work: Callable[[Connection], Awaitable[Sequence[str]]]
        ) -> Sequence[str]:
            return await self.runner.transaction(work)

        pieces = sized_chunks(firsts, self.dialect.bulk_rows, BULK_BYTES)
        return await _inserted(pieces, insert, run)

    async def _offer_batch(
        self,
        queue: str,
        offers: Sequence[Offer],
        now: int,
        may_use: QueueFilter,
        insert_firsts: Callable[[str, Sequence[Offer], int], Awaitable[set[str]]],
    ) -> list[Outcome]:
        """offer_many, with `insert_firsts` inserting the first occurrence of each key
        unless it exists (and telling which went in)."""
        first_index: dict[str, int] = {}
        for index, offer in enumerate(offers):
            self.dialect.check_payload(offer.payload)  # before anything is written
            first_index.setdefault(offer.key, index)

        firsts = [offers[index] for index in first_index.values()]
        created = await insert_firsts(queue, firsts, now)

        unchanged = await self._unchanged(
            queue,
            [
                offer
                for offer in firsts
                if offer.key not in created and offer.if_exists is IfExists.UPDATE
            ],
        )
        outcomes: list[Outcome] = []
        for index, offer in enumerate(offers):
            first = first_index[offer.key] == index
            if first and offer.key in created:
                outcomes.append(Outcome.CREATED)
            elif offer.if_exists is IfExists.IGNORE or (first and offer.key in unchanged):
                # The key exists (it was there before, or an earlier item created it),
                # or holds this very message already.
                outcomes.append(Outcome.IGNORED)
            else:
                # Existing keys to update, later occurrences, and inserts that lost a race.
                async def store(
                    connection: Connection, offer: Offer = offer
                ) -> OfferOutcome | None:
                    return await self._offer(
                        connection, queue, offer, now, can_create=True, may_use=may_use
                    )

                stored = await self.runner.transaction(store)
                assert stored is not None  # can_create is on
                outcomes.append(stored.outcome)
        return outcomes

    async def _unchanged(self, queue: str, offers: Sequence[Offer]) -> set[str]:
        """The keys of `offers` (one each) whose payload, time, priority, group and expiry are
        offered.

        A re-run of an import, or a producer sending again, then costs one read per
        chunk instead of a locked read and a commit per key.
        """
        unchanged: set[str] = set()
        digest = self.dialect.payload_digest
        for chunk in chunks(offers, INSERT_CHUNK):

            async def read(connection: Connection, chunk: Sequence[Offer] = chunk) -> Sequence[Any]:
                keys = [offer.key for offer in chunk]
                found = await connection.execute(
                    self.statements.stored_offers, {"queue": queue, "keys": keys}
                )
                return found.all()

            stored = {
                row.pKey: (
                    row.digest,
                    row.scheduledAtInitially,
                    shown_priority(row.priority),
                    row.messageGroup,
                    row.expiresAt,
                )
                for row in await self.runner.read(read)
            }
            unchanged.update(
                offer.key
                for offer in chunk
                if stored.get(offer.key)
                == (
                    digest(offer.payload),
                    offer.scheduled_at,
                    offer.priority,
                    offer.group,
                    offer.expires_at,
                )
            )
        return unchanged

    async def _offer(
        self,
        connection: Connection,
        queue: str,
        offer: Offer,
        now: int,
        can_create: bool,
        may_use: QueueFilter,
    ) -> OfferOutcome | None:
        """The documented offer once the INSERT found the key taken: lock the row, compare-and-swap.

        A row deleted meanwhile is inserted again (when creating is allowed); the
        loop ends as soon as one step wins.
        """
        key_parameters = {"queue": queue, "key": offer.key}
        for _ in range(_OFFER_RACE_ATTEMPTS):
            if offer.if_exists is IfExists.IGNORE:
                stored = (
                    await connection.execute(self.statements.offer_stored_schedule, key_parameters)
                ).scalar()
                if stored is not None:
                    return OfferOutcome(Outcome.IGNORED, stored)
            else:
                current = (
                    await connection.execute(
                        self.statements.offer_select_for_update, key_parameters
                    )
                ).first()
                if current is not None:
                    if (
                        current.payload,
                        current.scheduledAtInitially,
                        shown_priority(current.priority),
                        current.messageGroup,
                        current.expiresAt,
                    ) == (
                        offer.payload,
                        offer.scheduled_at,
                        offer.priority,
                        offer.group,
                        offer.expires_at,
                    ):
                        return OfferOutcome(Outcome.IGNORED, offer.scheduled_at)
                    if await self._swap(connection, key_parameters, current, offer, now, may_use):
                        return OfferOutcome(Outcome.UPDATED, offer.scheduled_at)
                    continue  # changed since we read it: read it again
            if not can_create:
                return None
            if await self.inserts.one(connection, queue, offer, now):
                return OfferOutcome(Outcome.CREATED, offer.scheduled_at)
        raise StorageUnavailable(f"too much contention on key {offer.key!r}; try again")

    async def _swap(
        self,
        connection: Connection,
        key_parameters: dict,
        current: Any,
        offer: Offer,
        now: int,
        may_use: QueueFilter,
    ) -> bool:
        """The compare-and-swap UPDATE: rewrite the row only if it is still the one read."""
        origin = current.deadLetteredFrom
        swapped = await connection.execute(
            self.statements.offer_update,
            {
                **key_parameters,
                "old_scheduled_at_initially": current.scheduledAtInitially,
                "old_created_at": current.createdAt,
                "old_origin": origin,
                "new_origin": origin if origin is not None and may_use(origin) else None,
                "new_payload": offer.payload,
                "new_priority": offer.stored_priority,
                "new_group": offer.group,
                "new_expires_at": offer.expires_at,
                "new_trace": None if offer.trace is None else offer.trace.stored(),
                "new_scheduled_at": offer.scheduled_at,
                "now": now,
            },
        )
        return swapped.rowcount == 1


async def _inserted(
    pieces: Iterator[Sequence[Offer]],
    insert: Callable[[Connection, Sequence[Offer]], Awaitable[Sequence[str]]],
    run: Callable[
        [Sequence[Offer], Callable[[Connection], Awaitable[Sequence[str]]]],
        Awaitable[Sequence[str]],
    ],
) -> set[str]:
    """The keys that `insert` put in, piece by piece, each piece run by `run(piece, work)`
    (in a transaction of its own, or autocommit)."""
    created: set[str] = set()
    for piece in pieces:

        async def one(connection: Connection, piece: Sequence[Offer] = piece) -> Sequence[str]:
            return await insert(connection, piece)

        created.update(await run(piece, one))
    return created
