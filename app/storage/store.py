"""The Store: every message operation as one method, over any supported database.

Methods are named noun_verb and take the current time as an argument; they
return frozen domain objects, never rows, and raise the domain's exceptions,
never a driver's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

from alembic.runtime.migration import MigrationContext
from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine

from app.queue.errors import StorageUnavailable
from app.queue.models import (
    Delivery,
    IfExists,
    Message,
    Offer,
    OfferOutcome,
    Outcome,
    QueueStats,
)
from app.storage import sql
from app.storage.dialects import Dialect
from app.storage.tables import delayed_queue as queue_table

T = TypeVar("T")

# Keys per `SELECT … WHERE "pKey" IN (…)` and rows per multi-row INSERT in a batch.
_EXISTING_KEYS_CHUNK = 500
_INSERT_CHUNK = 200
# Transient conflicts (deadlocks, serialization failures) and lost races on one key.
_TRANSACTION_ATTEMPTS = 5
_OFFER_RACE_ATTEMPTS = 100


class Store(Protocol):
    """What the queue service needs from storage."""

    def messages_offer(
        self, queue: str, offer: Offer, now: int, *, can_create: bool = True
    ) -> OfferOutcome | None: ...

    def messages_offer_many(
        self, queue: str, offers: Sequence[Offer], now: int
    ) -> list[Outcome]: ...

    def messages_get(self, queue: str, key: str) -> Message | None: ...

    def messages_delete(self, queue: str, key: str) -> bool: ...

    def messages_poll(
        self, queue: str, limit: int, lock_id: str, lease_until: int, now: int
    ) -> list[Delivery]: ...

    def queue_next_due(self, queue: str) -> int | None: ...

    def locks_acknowledge(self, queue: str, lock_id: str) -> int: ...

    def locks_extend(self, queue: str, lock_id: str, until: int) -> int: ...

    def locks_release(self, queue: str, lock_id: str, at: int) -> int: ...

    def queue_stats(self, queue: str, now: int) -> QueueStats: ...

    def queues_stats(self, now: int) -> list[QueueStats]: ...

    def queue_purge(self, queue: str) -> int: ...

    def schema_revision(self) -> str | None: ...


class SqlStore:
    """The Store over SQLAlchemy Core; `dialect` supplies what differs per database."""

    def __init__(self, engine: Engine, dialect: Dialect) -> None:
        self.engine = engine
        self.dialect = dialect
        # RETURNING tells which rows went in; rowcount is not reliable for every driver.
        self._insert_returning_keys = dialect.insert_ignoring_duplicates(queue_table).returning(
            sql.columns.pKey
        )

    # -- offers ---------------------------------------------------------------

    def messages_offer(
        self, queue: str, offer: Offer, now: int, *, can_create: bool = True
    ) -> OfferOutcome | None:
        """Create, update or ignore one message; None when `can_create` is off and it is missing."""
        return self._transaction(lambda connection: self._offer(connection, queue, offer, now, can_create))

    def messages_offer_many(self, queue: str, offers: Sequence[Offer], now: int) -> list[Outcome]:
        """Offer many messages; outcomes in input order, a repeated key as if offered in sequence."""
        first_index: dict[str, int] = {}
        for index, offer in enumerate(offers):
            first_index.setdefault(offer.key, index)

        existing: set[str] = set()
        unique_keys = list(first_index)
        for chunk in _chunks(unique_keys, _EXISTING_KEYS_CHUNK):
            existing.update(
                self._read(
                    lambda connection, chunk=chunk: connection.execute(
                        sql.existing_keys, {"queue": queue, "keys": chunk}
                    ).scalars().all()
                )
            )

        # The first occurrence of each new key goes in with multi-row INSERTs.
        new_indexes = [index for key, index in first_index.items() if key not in existing]
        created: set[str] = set()
        for chunk in _chunks(new_indexes, _INSERT_CHUNK):
            rows = [_row(queue, offers[index], now) for index in chunk]
            created.update(
                self._transaction(
                    lambda connection, rows=rows: connection.execute(
                        self._insert_returning_keys, rows
                    ).scalars().all()
                )
            )

        outcomes: list[Outcome] = []
        for index, offer in enumerate(offers):
            first = first_index[offer.key] == index
            if first and offer.key in created:
                outcomes.append(Outcome.CREATED)
            elif offer.if_exists is IfExists.IGNORE and (not first or offer.key in existing):
                # The key exists: it was there before, or an earlier item created it.
                outcomes.append(Outcome.IGNORED)
            else:
                # Existing keys to update, later occurrences, and inserts that lost a race.
                stored = self.messages_offer(queue, offer, now)
                assert stored is not None  # can_create is on
                outcomes.append(stored.outcome)
        return outcomes

    def _offer(
        self, connection: Connection, queue: str, offer: Offer, now: int, can_create: bool
    ) -> OfferOutcome | None:
        key_parameters = {"queue": queue, "key": offer.key}
        for _ in range(_OFFER_RACE_ATTEMPTS):
            if can_create:
                inserted = connection.execute(
                    self._insert_returning_keys, _row(queue, offer, now)
                ).first()
                if inserted is not None:
                    return OfferOutcome(Outcome.CREATED, offer.scheduled_at)
                if offer.if_exists is IfExists.IGNORE:
                    stored = connection.execute(sql.offer_stored_schedule, key_parameters).scalar()
                    if stored is None:
                        continue  # deleted since the insert saw it: insert again
                    return OfferOutcome(Outcome.IGNORED, stored)
            current = connection.execute(sql.offer_select_for_update, key_parameters).first()
            if current is None:
                if not can_create:
                    return None
                continue  # deleted since the insert saw it: insert again
            if current.payload == offer.payload and current.scheduledAtInitially == offer.scheduled_at:
                return OfferOutcome(Outcome.IGNORED, offer.scheduled_at)
            swapped = connection.execute(
                sql.offer_update,
                {
                    **key_parameters,
                    "old_scheduled_at_initially": current.scheduledAtInitially,
                    "old_created_at": current.createdAt,
                    "new_payload": offer.payload,
                    "new_scheduled_at": offer.scheduled_at,
                    "now": now,
                },
            ).rowcount
            if swapped == 1:
                return OfferOutcome(Outcome.UPDATED, offer.scheduled_at)
        raise StorageUnavailable(f"too much contention on key {offer.key!r}; try again")

    # -- reading and deleting one message -------------------------------------

    def messages_get(self, queue: str, key: str) -> Message | None:
        """The message under `key`, or None."""
        row = self._read(
            lambda connection: connection.execute(
                sql.message_get, {"queue": queue, "key": key}
            ).first()
        )
        if row is None:
            return None
        return Message(
            queue=queue,
            key=row.pKey,
            payload=row.payload,
            scheduled_at=row.scheduledAt,
            scheduled_at_initially=row.scheduledAtInitially,
            created_at=row.createdAt,
            locked=bool(row.locked),
        )

    def messages_delete(self, queue: str, key: str) -> bool:
        """Delete the message under `key`, leased or not; False when there was none."""
        return self._single(sql.message_delete, {"queue": queue, "key": key}) > 0

    # -- polling and locks ------------------------------------------------------

    def messages_poll(
        self, queue: str, limit: int, lock_id: str, lease_until: int, now: int
    ) -> list[Delivery]:
        """Lease up to `limit` due messages to `lock_id`, oldest due first."""
        parameters = {
            "queue": queue,
            "now": now,
            "limit": limit,
            "lock_id": lock_id,
            "lease_until": lease_until,
        }
        claimed = self._transaction(lambda connection: self.dialect.claim(connection, parameters))
        claimed.sort(key=lambda row: (row.previous_scheduled_at, row.key))
        return [
            Delivery(
                message=Message(
                    queue=queue,
                    key=row.key,
                    payload=row.payload,
                    scheduled_at=lease_until,
                    scheduled_at_initially=row.scheduled_at_initially,
                    created_at=row.created_at,
                    locked=True,
                ),
                redelivery=row.previous_scheduled_at != row.scheduled_at_initially,
            )
            for row in claimed
        ]

    def queue_next_due(self, queue: str) -> int | None:
        """The earliest `scheduledAt` in the queue (a due message or a lease that ends), or None."""
        return self._read(
            lambda connection: connection.execute(sql.queue_next_due, {"queue": queue}).scalar()
        )

    def locks_acknowledge(self, queue: str, lock_id: str) -> int:
        """Delete what `lock_id` still holds; how many messages that was."""
        return self._single(sql.lock_acknowledge, {"queue": queue, "lock_id": lock_id})

    def locks_extend(self, queue: str, lock_id: str, until: int) -> int:
        """Move the lease of what `lock_id` holds to end at `until`."""
        return self._single(sql.lock_extend, {"queue": queue, "lock_id": lock_id, "until": until})

    def locks_release(self, queue: str, lock_id: str, at: int) -> int:
        """Give back what `lock_id` holds, due again at `at`."""
        return self._single(sql.lock_release, {"queue": queue, "lock_id": lock_id, "at": at})

    # -- queues -----------------------------------------------------------------

    def queue_stats(self, queue: str, now: int) -> QueueStats:
        """Counts by state; zeros for a queue that holds nothing."""
        row = self._read(
            lambda connection: connection.execute(
                sql.queue_stats, {"queue": queue, "now": now}
            ).first()
        )
        if row is None:
            return QueueStats(queue, 0, 0, 0, 0, None, None)
        return _stats(row)

    def queues_stats(self, now: int) -> list[QueueStats]:
        """Stats of every queue that holds messages, by name."""
        rows = self._read(
            lambda connection: connection.execute(sql.queues_stats, {"now": now}).all()
        )
        return [_stats(row) for row in rows]

    def queue_purge(self, queue: str) -> int:
        """Delete every message of the queue; how many there were."""
        return self._single(sql.queue_purge, {"queue": queue})

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at, or None before the first migration."""
        return self._read(
            lambda connection: MigrationContext.configure(connection).get_current_revision()
        )

    # -- running statements -------------------------------------------------------

    def _single(self, statement: Any, parameters: dict) -> int:
        """Run one write statement on its own; the number of rows it touched."""
        with self._translated_errors():
            with self.engine.connect() as connection:
                connection = connection.execution_options(**self.dialect.single_statement_options)
                with connection.begin():
                    return connection.execute(statement, parameters).rowcount

    def _read(self, work: Callable[[Connection], T]) -> T:
        with self._translated_errors():
            with self.engine.connect() as connection:
                connection = connection.execution_options(**self.dialect.read_options)
                with connection.begin():
                    return work(connection)

    def _transaction(self, work: Callable[[Connection], T]) -> T:
        """Run `work` in one transaction, again on a transient conflict."""
        for attempt in range(1, _TRANSACTION_ATTEMPTS + 1):
            try:
                with self._translated_errors(retrying=attempt < _TRANSACTION_ATTEMPTS):
                    with self.engine.begin() as connection:
                        return work(connection)
            except _Retry:
                # Back off a little, with jitter, so the two sides of a deadlock part.
                time.sleep(random.uniform(0, 0.005 * 2**attempt))
        raise AssertionError("unreachable")

    @contextmanager
    def _translated_errors(self, retrying: bool = False) -> Iterator[None]:
        """Turn driver errors into StorageUnavailable (or a retry); let bugs through."""
        try:
            yield
        except exc.DBAPIError as error:
            if retrying and self.dialect.is_retryable(error):
                raise _Retry from error
            if self.dialect.is_schema_missing(error):
                raise StorageUnavailable(
                    "the database schema is not migrated: run `hourglass migrate`"
                ) from error
            if self.dialect.is_unavailable(error) or self.dialect.is_retryable(error):
                raise StorageUnavailable("the database is unavailable; retry shortly") from error
            raise
        except exc.TimeoutError as error:
            raise StorageUnavailable("the database is busy: no connection free in time") from error


class _Retry(Exception):
    """A transient conflict: the transaction is worth running again."""


def _row(queue: str, offer: Offer, now: int) -> dict[str, Any]:
    return {
        "pKey": offer.key,
        "pKind": queue,
        "payload": offer.payload,
        "scheduledAt": offer.scheduled_at,
        "scheduledAtInitially": offer.scheduled_at,
        "createdAt": now,
    }


def _stats(row: Any) -> QueueStats:
    return QueueStats(
        queue=row.pKind,
        messages=row.messages,
        ready=row.ready,
        scheduled=row.scheduled,
        leased=row.leased,
        oldest_ready_at=row.oldest_ready_at,
        next_scheduled_at=row.next_scheduled_at,
    )


def _chunks(items: Sequence[T], size: int) -> Iterator[Sequence[T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]

