"""The Store: every message operation as one method, over any supported database.

Methods are named noun_verb and take the current time as an argument; they
return frozen domain objects, never rows, and raise the domain's exceptions,
never a driver's.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from sqlalchemy import exc
from sqlalchemy.engine import Connection, Engine

from app.domain.cron import (
    CronEntry,
    CronInstall,
    InstallOutcome,
    kept_run_count,
    run_key,
    run_key_pattern,
    run_key_range,
    runs_to_install,
)
from app.domain.errors import StorageUnavailable
from app.domain.messages import (
    Claim,
    Delivery,
    Finish,
    IfExists,
    Message,
    Offer,
    OfferOutcome,
    Outcome,
    QueueFilter,
    QueueSettings,
    QueueStats,
    Redrive,
    every_queue,
)
from app.storage import sql
from app.storage.dialects import Dialect
from app.storage.runner import Runner, chunks
from app.storage.tables import delayed_queue as queue_table

T = TypeVar("T")
log = logging.getLogger(__name__)

# Rows per multi-row INSERT in a batch (SPEC §2).
_INSERT_CHUNK = 200
# Dead letters moved back per transaction by a redrive.
_REDRIVE_CHUNK = 500
# How long a poll holds messages it found past their delivery limit, should
# moving them to the dead-letter queue fail: then a later poll tries again.
_DEAD_LETTER_HOLD_MS = 30_000
# Lost races on one key: an offer reads and writes again at most this often.
_OFFER_RACE_ATTEMPTS = 100
# A poll's bound in answer bytes when it has none (any sum of a poll's sizes is smaller).
_UNBOUNDED = 2**62


class Store(Protocol):
    """What the queue service needs from storage."""

    # True when calls must run on the event loop, inside sqlalchemy.util.greenlet_spawn;
    # False when they block, and belong on a thread.
    runs_on_event_loop: bool

    def messages_offer(
        self,
        queue: str,
        offer: Offer,
        now: int,
        *,
        can_create: bool = True,
        may_use: QueueFilter = every_queue,
    ) -> OfferOutcome | None: ...

    def messages_offer_many(
        self, queue: str, offers: Sequence[Offer], now: int, may_use: QueueFilter = every_queue
    ) -> list[Outcome]: ...

    def messages_get(self, queue: str, key: str) -> Message | None: ...

    def messages_delete(self, queue: str, key: str, now: int) -> bool: ...

    def messages_poll(
        self,
        queue: str,
        limit: int,
        lock_id: str,
        lease_until: int,
        now: int,
        settings: QueueSettings | None = None,
        *,
        max_bytes: int | None = None,
    ) -> Claim: ...

    def messages_redrive(
        self, queue: str, to: str | None, limit: int, now: int, may_use: QueueFilter = every_queue
    ) -> Redrive: ...

    def queue_next_due(self, queue: str) -> int | None: ...

    def locks_acknowledge(self, queue: str, lock_id: str, now: int) -> int: ...

    def locks_extend(self, queue: str, lock_id: str, until: int) -> int: ...

    def locks_release(self, queue: str, lock_id: str, at: int) -> int: ...

    def queue_stats(self, queue: str, now: int) -> QueueStats: ...

    def queues_stats(self, now: int) -> list[QueueStats]: ...

    def queue_purge(self, queue: str, now: int) -> int: ...

    def settings_get(self, queue: str) -> QueueSettings | None: ...

    def settings_put(self, settings: QueueSettings) -> QueueSettings: ...

    def settings_queues(self) -> list[str]: ...

    def history_prune(self, before: int, batch: int) -> int: ...

    def schema_revision(self) -> str | None: ...

    def listen_statements(self, listener: Callable[[], object]) -> None: ...

    def close(self) -> None: ...


class SqlStore:
    """The Store over SQLAlchemy Core; `dialect` supplies what differs per database."""

    def __init__(self, engine: Engine, dialect: Dialect, *, record_history: bool = True) -> None:
        self.engine = engine
        self.dialect = dialect
        # Whether messages leaving a queue leave a row in delivery_history.
        self.record_history = record_history
        self._recorded_deletes = {
            removal: dialect.recorded_delete(removal)
            for removal in (
                sql.lock_acknowledge,
                sql.message_delete,
                sql.queue_purge,
                dialect.entry_runs.delete_pending,
            )
        }
        # The one way its statements run: transactions, retries, bounds, error translation.
        self.runner = Runner(engine, dialect)
        self.runs_on_event_loop = self.runner.runs_on_event_loop
        # RETURNING tells which rows went in; rowcount is not reliable for every driver.
        self._insert_returning_keys = dialect.insert_ignoring_duplicates(queue_table).returning(
            sql.columns.pKey
        )

    # -- offers ---------------------------------------------------------------

    def messages_offer(
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
        # database allows. Only an existing key needs the transaction below.
        if can_create and self.runner.autocommit(
            lambda connection: self._insert(connection, queue, offer, now)
        ):
            return OfferOutcome(Outcome.CREATED, offer.scheduled_at)
        return self.runner.transaction(
            lambda connection: self._offer(connection, queue, offer, now, can_create, may_use)
        )

    def messages_offer_many(
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
        first_index: dict[str, int] = {}
        for index, offer in enumerate(offers):
            self.dialect.check_payload(offer.payload)  # before anything is written
            first_index.setdefault(offer.key, index)

        created: set[str] = set()
        firsts = [offers[index] for index in first_index.values()]
        for chunk in self._insertchunks(firsts):
            rows = [_row(queue, offer, now) for offer in chunk]
            created.update(
                self.runner.autocommit(
                    lambda connection, rows=rows: self.dialect.insert_many(
                        connection, self._insert_returning_keys, rows
                    )
                )
            )

        unchanged = self._unchanged(
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
                stored = self.runner.transaction(
                    lambda connection, offer=offer: self._offer(
                        connection, queue, offer, now, can_create=True, may_use=may_use
                    )
                )
                assert stored is not None  # can_create is on
                outcomes.append(stored.outcome)
        return outcomes

    def _unchanged(self, queue: str, offers: Sequence[Offer]) -> set[str]:
        """The keys of `offers` (one each) whose payload and time are stored as offered.

        A re-run of an import, or a producer sending again, then costs one read per
        chunk instead of a locked read and a commit per key.
        """
        unchanged: set[str] = set()
        digest = self.dialect.payload_digest
        for chunk in chunks(offers, _INSERT_CHUNK):
            stored = {
                row.pKey: (row.digest, row.scheduledAtInitially)
                for row in self.runner.read(
                    lambda connection, chunk=chunk: connection.execute(
                        self.dialect.stored_offers,
                        {"queue": queue, "keys": [offer.key for offer in chunk]},
                    ).all()
                )
            }
            unchanged.update(
                offer.key
                for offer in chunk
                if stored.get(offer.key) == (digest(offer.payload), offer.scheduled_at)
            )
        return unchanged

    def _insertchunks(self, offers: Sequence[Offer]) -> Iterator[Sequence[Offer]]:
        """`offers` in chunks of _INSERT_CHUNK, each smaller than the dialect's statement
        limit where it has one (payloads counted twice: a text protocol escapes them)."""
        limit = self.dialect.max_statement_bytes
        if limit is None:
            yield from chunks(offers, _INSERT_CHUNK)
            return
        start = 0
        while start < len(offers):
            end, size = start, 0
            while end < len(offers) and end - start < _INSERT_CHUNK:
                size += 2 * len(offers[end].payload) + 1024  # the row's other values, roughly
                if size > limit and end > start:
                    break
                end += 1
            yield offers[start:end]
            start = end

    def _insert(self, connection: Connection, queue: str, offer: Offer, now: int) -> bool:
        """INSERT unless the key exists; whether it went in."""
        return (
            connection.execute(self._insert_returning_keys, _row(queue, offer, now)).first()
            is not None
        )

    def _offer(
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
                stored = connection.execute(sql.offer_stored_schedule, key_parameters).scalar()
                if stored is not None:
                    return OfferOutcome(Outcome.IGNORED, stored)
            else:
                current = connection.execute(sql.offer_select_for_update, key_parameters).first()
                if current is not None:
                    if (current.payload, current.scheduledAtInitially) == (
                        offer.payload,
                        offer.scheduled_at,
                    ):
                        return OfferOutcome(Outcome.IGNORED, offer.scheduled_at)
                    if self._swap(connection, key_parameters, current, offer, now, may_use):
                        return OfferOutcome(Outcome.UPDATED, offer.scheduled_at)
                    continue  # changed since we read it: read it again
            if not can_create:
                return None
            if self._insert(connection, queue, offer, now):
                return OfferOutcome(Outcome.CREATED, offer.scheduled_at)
        raise StorageUnavailable(f"too much contention on key {offer.key!r}; try again")

    def _swap(
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
        return (
            connection.execute(
                sql.offer_update,
                {
                    **key_parameters,
                    "old_scheduled_at_initially": current.scheduledAtInitially,
                    "old_created_at": current.createdAt,
                    "old_origin": origin,
                    "new_origin": origin if origin is not None and may_use(origin) else None,
                    "new_payload": offer.payload,
                    "new_scheduled_at": offer.scheduled_at,
                    "now": now,
                },
            ).rowcount
            == 1
        )

    # -- reading and deleting one message -------------------------------------

    def messages_get(self, queue: str, key: str) -> Message | None:
        """The message under `key`, or None."""
        row = self.runner.read(
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
            deliveries=row.deliveries,
            dead_lettered_from=row.deadLetteredFrom,
        )

    def messages_delete(self, queue: str, key: str, now: int) -> bool:
        """Delete the message under `key`, leased or not; False when there was none."""
        return self._remove(sql.message_delete, {"queue": queue, "key": key}, now) > 0

    # -- polling and locks ------------------------------------------------------

    def messages_poll(
        self,
        queue: str,
        limit: int,
        lock_id: str,
        lease_until: int,
        now: int,
        settings: QueueSettings | None = None,
        *,
        max_bytes: int | None = None,
    ) -> Claim:
        """Lease up to `limit` due messages to `lock_id`, oldest due first, while their
        payloads with POLL_MESSAGE_ENVELOPE_BYTES each fit in `max_bytes` (the first
        always; None: no bound). Messages left out are not touched.

        With a delivery limit in `settings`, a due message already delivered that
        often goes to the dead-letter queue instead (see sql.claim_values).
        """
        max_deliveries = settings.max_deliveries if settings else None
        parameters: dict[str, Any] = {
            "queue": queue,
            "now": now,
            "limit": limit,
            "lock_id": lock_id,
            "lease_until": lease_until,
            "max_bytes": _UNBOUNDED if max_bytes is None else max_bytes,
        }
        if max_deliveries is not None:  # the statement that checks the limit
            parameters["max_deliveries"] = max_deliveries
            parameters["dead_lock_id"] = str(uuid.uuid4())
            parameters["dead_hold_until"] = now + _DEAD_LETTER_HOLD_MS
        run = (
            self.runner.autocommit
            if self.dialect.claims_in_one_statement
            else self.runner.transaction
        )
        claimed = run(lambda connection: self.dialect.claim(connection, parameters))
        try:
            claimed = self._with_payloads(claimed, lock_id, max_deliveries)
        except StorageUnavailable:
            # The poll answers 503: nobody may be left holding what it took.
            self._give_back(queue, claimed, lock_id, max_deliveries)
            raise
        claimed.sort(key=lambda row: (row.previous_scheduled_at, row.id))
        deliveries = [
            Delivery(
                message=Message(
                    queue=queue,
                    key=row.key,
                    payload=row.payload,
                    scheduled_at=lease_until,
                    scheduled_at_initially=row.scheduled_at_initially,
                    created_at=row.created_at,
                    locked=True,
                    deliveries=row.previous_deliveries + 1,
                    dead_lettered_from=row.dead_lettered_from,
                ),
                redelivery=row.previous_scheduled_at != row.scheduled_at_initially,
            )
            for row in claimed
            if row.delivered(max_deliveries)
        ]
        dead_lettered = 0
        if len(deliveries) < len(claimed):
            assert settings is not None
            try:
                dead_lettered = self._dead_letter(queue, parameters["dead_lock_id"], settings, now)
            except StorageUnavailable as error:
                # The deliveries stand; the held rows come back when the hold ends.
                log.warning("dead-lettering in %r failed, tried again later: %s", queue, error)
        return Claim(deliveries, dead_lettered, exhausted=len(claimed) - len(deliveries))

    def _with_payloads(
        self, claimed: list[sql.ClaimedRow], lock_id: str, max_deliveries: int | None
    ) -> list[sql.ClaimedRow]:
        """`claimed` with the payloads the claim left out read, after it committed: the
        rows it left out of the answer are then free again for other polls. A message
        updated or deleted in between is no longer the lock's, and is left out."""
        missing = [row for row in claimed if row.payload is None and row.delivered(max_deliveries)]
        if not missing:
            return claimed
        payloads = self.runner.read(
            lambda connection: sql.read_payloads(
                connection, self.dialect.claimed_payloads, missing, lock_id
            )
        )
        read = {row.id for row in missing}
        return [
            dataclasses.replace(row, payload=payloads[row.id]) if row.id in read else row
            for row in claimed
            if row.id not in read or row.id in payloads
        ]

    def _give_back(
        self, queue: str, claimed: list[sql.ClaimedRow], lock_id: str, max_deliveries: int | None
    ) -> None:
        """Undo, as far as the database allows now, a claim whose answer cannot be made:
        each delivered row its lock still holds is due when it was, held as it was (by
        nobody, or by the holder of a lease that ran out), with the delivery counts it
        had (so a message whose limit is one delivery is not dead-lettered for a
        delivery nobody received). A row to dead-letter stays
        held until its hold ends, as when dead-lettering fails.

        Best effort: the database just failed a read, and may fail this too. Then the
        rows stay leased under a lock no client knows until the lease runs out, with
        one delivery more counted (docs/decisions/0003-the-poll-statement.md).
        """
        delivered = [row for row in claimed if row.delivered(max_deliveries)]

        def give_back(connection: Connection) -> int:
            return sum(
                connection.execute(
                    sql.claim_give_back,
                    {
                        "claimed_id": row.id,
                        "lock_id": lock_id,
                        "previous_scheduled_at": row.previous_scheduled_at,
                        "previous_lock_id": row.previous_lock_id,
                        "previous_deliveries": row.previous_deliveries,
                        "previous_first_delivered_at": row.previous_first_delivered_at,
                        "previous_last_delivered_at": row.previous_last_delivered_at,
                    },
                ).rowcount
                for row in delivered
            )

        try:
            self.runner.transaction(give_back)
        except StorageUnavailable as error:
            log.warning(
                "a poll of %r could not give back the %d messages it leased and cannot "
                "answer; they come back when their lease ends: %s",
                queue,
                len(delivered),
                error,
            )

    def _dead_letter(self, queue: str, dead_lock_id: str, settings: QueueSettings, now: int) -> int:
        """Move what a poll held under `dead_lock_id` to the dead-letter queue; how many.

        A dead letter whose key the dead-letter queue already holds replaces the
        older one (recorded as dropped), unless a worker holds that one: then it
        stays held here until the hold ends, and a later poll tries again.
        """
        dead_letter_queue = settings.effective_dead_letter_queue
        held = {"queue": queue, "dead_lock_id": dead_lock_id}

        def move(connection: Connection) -> int:
            keys = connection.execute(sql.dead_letter_keys, held).scalars().all()
            if not keys:
                return 0
            taken = (
                connection.execute(
                    self.dialect.existing_keys, {"queue": dead_letter_queue, "keys": list(keys)}
                )
                .scalars()
                .all()
            )
            waiting = set()
            for key in taken:
                there = {"queue": dead_letter_queue, "key": key}
                if connection.execute(sql.message_held, {**there, "now": now}).scalar():
                    waiting.add(key)
                else:
                    self._remove_on(connection, sql.message_delete, there, now)
            moved = 0
            for key in keys:
                if key in waiting:
                    continue
                parameters = {**held, "key": key, "dead_letter_queue": dead_letter_queue}
                if self.record_history:
                    connection.execute(
                        sql.dead_letter_record,
                        {**parameters, "outcome": Finish.DEAD_LETTERED.value, "now": now},
                    )
                moved += connection.execute(
                    sql.dead_letter_move, {**parameters, "now": now}
                ).rowcount
            return moved

        return self.runner.transaction_over_keys(move, f"dead-lettering in {queue!r}")

    def messages_redrive(
        self,
        queue: str,
        to: str | None,
        limit: int,
        now: int,
        may_use: QueueFilter = every_queue,
    ) -> Redrive:
        """Move up to `limit` messages of a dead-letter queue back, as new messages due now:
        to `to`, or each to the queue it came from. A message whose key the target holds,
        or that came from no queue, stays (skipped); so does one whose target `may_use`
        refuses (forbidden). Each target is judged on the rows as locked for the move, so a
        dead letter cannot change its way back between the check and the move."""
        moved = skipped = forbidden = 0
        after = 0
        while moved < limit:
            chunk = min(_REDRIVE_CHUNK, limit - moved)

            def redrive(connection: Connection, after: int = after, chunk: int = chunk):
                rows = connection.execute(
                    sql.redrive_candidates,
                    {"queue": queue, "now": now, "after": after, "limit": chunk},
                ).all()
                by_target: dict[str | None, list[str]] = {}
                for row in rows:
                    by_target.setdefault(to or row.deadLetteredFrom, []).append(row.pKey)
                moved = skipped = forbidden = 0
                for target, keys in by_target.items():
                    if target is None:
                        skipped += len(keys)
                        continue
                    if not may_use(target):
                        forbidden += len(keys)
                        continue
                    taken = set(
                        connection.execute(
                            self.dialect.existing_keys, {"queue": target, "keys": keys}
                        ).scalars()
                    )
                    skipped += len(taken)
                    for key in keys:
                        if key not in taken:
                            moved += connection.execute(
                                sql.redrive_move,
                                {"queue": queue, "key": key, "target": target, "now": now},
                            ).rowcount
                last = rows[-1].id if rows else after
                return Redrive(moved, skipped, forbidden), len(rows), last

            done, examined, after = self.runner.transaction_over_keys(
                redrive, f"redriving {queue!r}"
            )
            moved += done.moved
            skipped += done.skipped
            forbidden += done.forbidden
            if examined < chunk:
                break
        return Redrive(moved, skipped, forbidden)

    def queue_next_due(self, queue: str) -> int | None:
        """The earliest `scheduledAt` in the queue (a due message or a lease that ends), or None."""
        return self.runner.read(
            lambda connection: connection.execute(sql.queue_next_due, {"queue": queue}).scalar()
        )

    def locks_acknowledge(self, queue: str, lock_id: str, now: int) -> int:
        """Delete what `lock_id` still holds; how many messages that was."""
        return self._remove(
            sql.lock_acknowledge,
            {"queue": queue, "lock_id": lock_id},
            now,
            Finish.ACKNOWLEDGED,
        )

    def locks_extend(self, queue: str, lock_id: str, until: int) -> int:
        """Move the lease of what `lock_id` holds to end at `until`."""
        return self.runner.single(
            sql.lock_extend, {"queue": queue, "lock_id": lock_id, "until": until}
        )

    def locks_release(self, queue: str, lock_id: str, at: int) -> int:
        """Give back what `lock_id` holds, due again at `at`."""
        return self.runner.single(sql.lock_release, {"queue": queue, "lock_id": lock_id, "at": at})

    # -- queues -----------------------------------------------------------------

    def queue_stats(self, queue: str, now: int) -> QueueStats:
        """Counts by state; zeros for a queue that holds nothing."""
        row = self.runner.read(
            lambda connection: connection.execute(
                sql.queue_stats, {"queue": queue, "now": now}
            ).first()
        )
        if row is None:
            return QueueStats(queue, 0, 0, 0, 0, None, None)
        return _stats(row)

    def queues_stats(self, now: int) -> list[QueueStats]:
        """Stats of every queue that holds messages or cron entries, by name."""

        def read(connection: Connection) -> tuple[list[Any], list[str]]:
            return (
                connection.execute(sql.queues_stats, {"now": now}).all(),
                connection.execute(sql.cron_queues, {}).scalars().all(),
            )

        rows, cron_queues = self.runner.read(read)
        stats = {row.pKind: _stats(row) for row in rows}
        for queue in cron_queues:
            stats.setdefault(queue, QueueStats(queue, 0, 0, 0, 0, None, None))
        return [stats[queue] for queue in sorted(stats)]

    def queue_purge(self, queue: str, now: int) -> int:
        """Delete every message of the queue; how many there were.

        A queue may hold millions of messages, and one DELETE of them all would outlast
        the statement bound: the dialect removes them in pages, one transaction still.
        """
        parameters: dict[str, Any] = {"queue": queue}
        if self.record_history:
            parameters |= {"outcome": Finish.DROPPED.value, "now": now}
        return self.runner.transaction(
            lambda connection: self.dialect.remove_in_pages(
                connection, sql.queue_purge, parameters, record=self.record_history
            )
        )

    # -- queue settings and history ------------------------------------------------

    def settings_get(self, queue: str) -> QueueSettings | None:
        """The queue's own settings, or None when it has the defaults."""
        row = self.runner.read(
            lambda connection: connection.execute(sql.settings_select, {"queue": queue}).first()
        )
        if row is None:
            return None
        return QueueSettings(
            queue=row.queue,
            default_lease_ms=row.defaultLeaseMs,
            max_deliveries=row.maxDeliveries,
            dead_letter_queue=row.deadLetterQueue,
            updated_at=row.updatedAt,
        )

    def settings_queues(self) -> list[str]:
        """The queues that have settings of their own."""
        return self.runner.read(
            lambda connection: list(connection.execute(sql.settings_queues, {}).scalars())
        )

    def settings_put(self, settings: QueueSettings) -> QueueSettings:
        """Store the queue's settings, replacing any it had."""
        values = {
            "new_default_lease_ms": settings.default_lease_ms,
            "new_max_deliveries": settings.max_deliveries,
            "new_dead_letter_queue": settings.dead_letter_queue,
            "now": settings.updated_at,
        }

        def put(connection: Connection) -> None:
            updated = connection.execute(
                sql.settings_update, {"settings_queue": settings.queue, **values}
            ).rowcount
            if not updated:
                connection.execute(
                    sql.settings_insert,
                    {
                        "queue": settings.queue,
                        "defaultLeaseMs": settings.default_lease_ms,
                        "maxDeliveries": settings.max_deliveries,
                        "deadLetterQueue": settings.dead_letter_queue,
                        "updatedAt": settings.updated_at,
                    },
                )

        self.runner.transaction_over_keys(put, f"on the settings of {settings.queue!r}")
        return settings

    def history_prune(self, before: int, batch: int) -> int:
        """Delete about `batch` history rows that finished before `before`; how many."""

        def prune(connection: Connection) -> int:
            end = connection.execute(
                sql.history_batch_end, {"before": before, "last": batch - 1}
            ).first()
            if end is None:  # fewer than a batch left
                return connection.execute(sql.history_prune_rest, {"before": before}).rowcount
            return connection.execute(
                sql.history_prune_batch,
                {"upto_finished_at": end.finishedAt, "upto_id": end.id},
            ).rowcount

        return self.runner.transaction(prune)

    # -- cron entries -----------------------------------------------------------------

    def cron_install(self, entry: CronEntry) -> CronInstall:
        """Create or replace an entry; a new configuration deletes the old one's pending runs."""
        self.dialect.check_payload(entry.payload)
        # A replica that created the entry first makes this one replace it.
        return self.runner.transaction_over_keys(
            lambda connection: self._cron_install(connection, entry),
            f"on cron entry {entry.name!r}",
        )

    def _cron_install(self, connection: Connection, entry: CronEntry) -> CronInstall:
        # Locks the entry's row: a replica installing runs of it (share lock) finishes first.
        key = {"entry_queue": entry.queue, "entry_name": entry.name}
        row = connection.execute(sql.cron_select_for_update, key).first()
        if row is None:
            connection.execute(sql.cron_insert, _cron_row(entry))
            return CronInstall(InstallOutcome.CREATED, entry, 0)
        stored = _cron_entry(row)
        if (stored.config_hash, stored.lookahead_ms) == (entry.config_hash, entry.lookahead_ms):
            return CronInstall(InstallOutcome.UNCHANGED, stored, 0)
        connection.execute(
            sql.cron_update,
            {
                **key,
                "new_schedule": entry.schedule,
                "new_payload": entry.payload,
                "new_config_hash": entry.config_hash,
                "new_lookahead_ms": entry.lookahead_ms,
                "now": entry.updated_at,
            },
        )
        removed = 0
        if stored.config_hash != entry.config_hash:
            removed = self._remove_on(
                connection,
                self.dialect.entry_runs.delete_pending,
                _runs_of(entry.queue, entry.name, stored.config_hash),
                entry.updated_at,
            )
        changed = dataclasses.replace(entry, created_at=stored.created_at)
        return CronInstall(InstallOutcome.CHANGED, changed, removed)

    def cron_uninstall(self, queue: str, name: str, now: int) -> int | None:
        """Delete the entry and its pending runs; how many runs, or None when there was no entry."""

        def uninstall(connection: Connection) -> int | None:
            entry_key = {"entry_queue": queue, "entry_name": name}
            if not connection.execute(sql.cron_delete, entry_key).rowcount:
                return None
            return self._remove_on(
                connection, self.dialect.entry_runs.delete_pending, _runs_of(queue, name), now
            )

        return self.runner.transaction(uninstall)

    def cron_install_runs(
        self, entry: CronEntry, runs: Sequence[Offer], now: int, *, limit: int, keep_until: int
    ) -> int | None:
        """Bring the entry's runs under `limit` and add the first of `runs` that fit; how
        many went in, or None when the entry was changed or removed meanwhile (then
        nothing is written).

        The entry's stored runs (of its configuration, in any state) lose those due after
        `keep_until` and, past `limit`, the latest not yet due (app/domain/cron.py:
        kept_run_count); then `runs` (earliest first) whose keys are free go in while
        fewer than `limit` are stored. The entry's row is locked for the transaction:
        replicas installing runs of one entry take turns, so the count is exact, and a
        change or an uninstall waits, and its delete of the old runs then sees these.
        """
        key = {"entry_queue": entry.queue, "entry_name": entry.name}
        of_configuration = _runs_of(entry.queue, entry.name, entry.config_hash)
        statements = self.dialect.entry_runs

        def install(connection: Connection) -> int | None:
            current = connection.execute(sql.cron_select_for_update, key).first()
            if current is None or current.configHash != entry.config_hash:
                return None
            stored = sorted(connection.execute(statements.keys, of_configuration).scalars())
            kept = kept_run_count(
                stored,
                limit,
                due_until=run_key(entry.name, entry.config_hash, now),
                keep_until=run_key(entry.name, entry.config_hash, keep_until),
            )
            removed = 0
            if kept < len(stored):
                after = {"after_key": stored[kept - 1]} if kept else {}
                removed = self._remove_on(
                    connection, statements.delete_pending, {**of_configuration, **after}, now
                )
            fresh = runs_to_install(
                stored, [run.key for run in runs], limit - (len(stored) - removed)
            )
            chosen = set(fresh)
            return sum(
                len(
                    self.dialect.insert_many(
                        connection,
                        self._insert_returning_keys,
                        [_row(entry.queue, run, now) for run in chunk],
                    )
                )
                for chunk in self._insertchunks([run for run in runs if run.key in chosen])
            )

        return self.runner.transaction(install)

    def cron_get(self, queue: str, name: str) -> CronEntry | None:
        row = self.runner.read(
            lambda connection: connection.execute(
                sql.cron_select, {"entry_queue": queue, "entry_name": name}
            ).first()
        )
        return None if row is None else _cron_entry(row)

    def cron_list(self, queue: str | None = None) -> list[CronEntry]:
        """The entries of one queue, or of every queue, by queue and name."""
        if queue is None:
            rows = self.runner.read(
                lambda connection: connection.execute(sql.cron_list_all, {}).all()
            )
        else:
            rows = self.runner.read(
                lambda connection: connection.execute(sql.cron_list_queue, {"queue": queue}).all()
            )
        return [_cron_entry(row) for row in rows]

    def cron_names(self) -> list[tuple[str, str]]:
        """The (queue, name) of every entry."""
        return self.runner.read(
            lambda connection: [
                (row.queue, row.name) for row in connection.execute(sql.cron_names, {})
            ]
        )

    def schema_revision(self) -> str | None:
        """The Alembic revision the database is at, or None before the first migration."""

        def read(connection: Connection) -> str | None:
            try:
                return connection.execute(sql.schema_revision, {}).scalar()
            except exc.DBAPIError as error:
                if self.dialect.is_schema_missing(error):
                    return None  # no alembic_version table: never migrated
                raise

        return self.runner.read(read)

    def listen_statements(self, listener: Callable[[], object]) -> None:
        """Call `listener` after every statement sent to the database."""
        self.runner.listen_statements(listener)

    def close(self) -> None:
        """Close every pooled connection."""
        self.runner.close()

    # -- removals, recorded in the history -----------------------------------------

    def _remove(
        self, removal: sql.Removal, parameters: dict, now: int, finish: Finish = Finish.DROPPED
    ) -> int:
        """Delete what `removal` matches, recording it in the history; how many rows."""
        if not self.record_history or self._recorded_deletes.get(removal) is not None:
            run = self.runner.autocommit  # one statement
        else:
            run = self.runner.transaction
        return run(lambda connection: self._remove_on(connection, removal, parameters, now, finish))

    def _remove_on(
        self,
        connection: Connection,
        removal: sql.Removal,
        parameters: dict,
        now: int,
        finish: Finish = Finish.DROPPED,
    ) -> int:
        if not self.record_history:
            return connection.execute(removal.delete, parameters).rowcount
        parameters = {**parameters, "outcome": finish.value, "now": now}
        recorded_delete = self._recorded_deletes.get(removal)
        if recorded_delete is not None:
            return connection.execute(recorded_delete, parameters).rowcount
        return self.dialect.remove_recorded(connection, removal, parameters)


def _row(queue: str, offer: Offer, now: int) -> dict[str, Any]:
    return {
        "pKey": offer.key,
        "pKind": queue,
        "payload": offer.payload,
        "scheduledAt": offer.scheduled_at,
        "scheduledAtInitially": offer.scheduled_at,
        "createdAt": now,
    }


def _cron_row(entry: CronEntry) -> dict[str, Any]:
    return {
        "queue": entry.queue,
        "name": entry.name,
        "schedule": entry.schedule,
        "payload": entry.payload,
        "configHash": entry.config_hash,
        "lookaheadMs": entry.lookahead_ms,
        "createdAt": entry.created_at,
        "updatedAt": entry.updated_at,
    }


def _cron_entry(row: Any) -> CronEntry:
    return CronEntry(
        queue=row.queue,
        name=row.name,
        schedule=row.schedule,
        payload=row.payload,
        config_hash=row.configHash,
        lookahead_ms=row.lookaheadMs,
        created_at=row.createdAt,
        updated_at=row.updatedAt,
    )


def _runs_of(queue: str, name: str, config_hash: str | None = None) -> dict[str, Any]:
    """Parameters of the EntryRuns statements for an entry's runs (of one configuration)."""
    after_key, before_key = run_key_range(name, config_hash)
    return {
        "queue": queue,
        "after_key": after_key,
        "before_key": before_key,
        "pattern": run_key_pattern(name, config_hash),
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
