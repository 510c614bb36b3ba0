"""Hourglass as a benchmark target, twice: the service over HTTP, and its raw-SQL ceiling.

The ceiling runs the statements the service runs on PostgreSQL (the same text,
the same round trips, autocommit where the service commits one statement on its
own), straight through psycopg on one connection per worker, with no HTTP, no
JSON and no SQLAlchemy. Both targets share the `delayed_queue` table.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

import psycopg
from psycopg import sql
from psycopg.types.array import ListBinaryDumper

from app.config import Settings
from app.domain.messages import POLL_MESSAGE_ENVELOPE_BYTES
from app.storage.statements.leases import PAYLOAD_READ_BYTES
from bench.http_client import Connection

QUEUE = "bench"
LEASE_SECONDS = 30
# The bound on a poll's answer the service's statements take (HOURGLASS_MAX_POLL_BYTES).
MAX_POLL_BYTES = Settings.model_fields["max_poll_bytes"].default

# The statements exactly as the service sends them on PostgreSQL (SQLAlchemy's
# compilation for psycopg: the same text, casts and parameter names), so that the ceiling
# runs what the service runs; tests/bench/test_ceiling_statements.py holds them to it.
# A single offer (app/storage/offers.py).
OFFER = (
    'INSERT INTO delayed_queue ("pKey", "pKind", payload, "scheduledAt", '
    '"scheduledAtInitially", "createdAt", priority, "messageGroup", "expiresAt", trace) VALUES '
    "(%(pKey)s::VARCHAR, %(pKind)s::VARCHAR, %(payload)s, %(scheduledAt)s::BIGINT, "
    "%(scheduledAtInitially)s::BIGINT, %(createdAt)s::BIGINT, %(priority)s::SMALLINT, "
    "%(messageGroup)s::VARCHAR, %(expiresAt)s::BIGINT, %(trace)s::VARCHAR) "
    'ON CONFLICT ("pKey", "pKind") DO NOTHING RETURNING '
    'delayed_queue."pKey"'
)
# A batch's rows as arrays (app/storage/dialects/postgresql/messages.py).
OFFER_ROWS = (
    'INSERT INTO delayed_queue ("pKey", "pKind", payload, "scheduledAt", '
    '"scheduledAtInitially", "createdAt", priority, "messageGroup", "expiresAt", trace) SELECT '
    "batch.key, %(queue)s::VARCHAR AS anon_1, batch.payload, batch.scheduled_at, "
    "batch.scheduled_at AS scheduled_at__1, %(now)s::BIGINT AS anon_2, "
    "batch.priority, batch.message_group, batch.expires_at, batch.trace "
    "\nFROM unnest(%(keys)s::VARCHAR[], "
    "%(payloads)s::BYTEA[], %(scheduled_ats)s::BIGINT[], %(priorities)s::SMALLINT[], "
    "%(groups)s::VARCHAR[], %(expires_ats)s::BIGINT[], %(traces)s::VARCHAR[]) AS batch(key, "
    "payload, scheduled_at, priority, message_group, expires_at, trace) "
    'ON CONFLICT ("pKey", "pKind") DO NOTHING RETURNING '
    'delayed_queue."pKey"'
)
# The poll of one, for a queue without a delivery limit: one range of the poll's index
# per priority (docs/decisions/0017-priorities.md), no running sums.
CLAIM_ONE = (
    'UPDATE delayed_queue SET "scheduledAt"=%(lease_until)s::BIGINT, '
    '"lockUuid"=%(lock_id)s::VARCHAR, deliveries=(delayed_queue.deliveries + '
    "%(deliveries_1)s::INTEGER), "
    '"firstDeliveredAt"=coalesce(delayed_queue."firstDeliveredAt", %(now)s), '
    '"lastDeliveredAt"=%(now)s::BIGINT FROM (SELECT candidates.id AS id, candidates.priority '
    "AS priority, candidates.previous_scheduled_at AS previous_scheduled_at, "
    "candidates.previous_lock_id AS previous_lock_id, candidates.previous_deliveries AS "
    "previous_deliveries, candidates.previous_first_delivered_at AS "
    "previous_first_delivered_at, candidates.previous_last_delivered_at AS "
    "previous_last_delivered_at, candidates.payload_bytes AS payload_bytes \nFROM (VALUES "
    "(9), (8), (7), (6), (5), (4), (3), (2), (1), (0)) AS priorities (priority) JOIN LATERAL "
    "(SELECT delayed_queue.id AS id, delayed_queue.priority AS priority, "
    'delayed_queue."scheduledAt" AS previous_scheduled_at, delayed_queue."lockUuid" AS '
    "previous_lock_id, delayed_queue.deliveries AS previous_deliveries, "
    'delayed_queue."firstDeliveredAt" AS previous_first_delivered_at, '
    'delayed_queue."lastDeliveredAt" AS previous_last_delivered_at, '
    "length(delayed_queue.payload) AS payload_bytes \nFROM delayed_queue \nWHERE "
    'delayed_queue."pKind" = %(queue)s::VARCHAR AND delayed_queue.priority = '
    'priorities.priority AND delayed_queue."scheduledAt" <= %(now)s::BIGINT AND '
    '(delayed_queue."expiresAt" IS NULL OR delayed_queue."expiresAt" > %(now)s::BIGINT) '
    'ORDER BY delayed_queue."scheduledAt", delayed_queue.id \n LIMIT %(limit)s FOR UPDATE SKIP '
    "LOCKED) AS candidates ON true \n LIMIT %(limit)s) AS locked WHERE delayed_queue.id = "
    'locked.id RETURNING delayed_queue.id, delayed_queue."pKey", CASE WHEN '
    "(locked.payload_bytes <= %(payload_bytes_1)s::INTEGER) THEN delayed_queue.payload END "
    "AS payload, locked.payload_bytes, locked.previous_scheduled_at, "
    'delayed_queue."scheduledAtInitially", delayed_queue."createdAt", '
    "locked.previous_lock_id, locked.previous_deliveries, "
    "locked.previous_first_delivered_at, locked.previous_last_delivered_at, "
    'delayed_queue."deadLetteredFrom", delayed_queue.priority, delayed_queue."messageGroup", '
    'delayed_queue."expiresAt", delayed_queue.trace'
)
# The poll of more than one: the same, with the running sums that bound the answer.
CLAIM_MANY = (
    'UPDATE delayed_queue SET "scheduledAt"=%(lease_until)s::BIGINT, '
    '"lockUuid"=%(lock_id)s::VARCHAR, deliveries=(delayed_queue.deliveries + '
    "%(deliveries_1)s::INTEGER), "
    '"firstDeliveredAt"=coalesce(delayed_queue."firstDeliveredAt", %(now)s), '
    '"lastDeliveredAt"=%(now)s::BIGINT FROM (SELECT locked.id AS id, locked.priority AS '
    "priority, locked.previous_scheduled_at AS previous_scheduled_at, "
    "locked.previous_lock_id AS previous_lock_id, locked.previous_deliveries AS "
    "previous_deliveries, locked.previous_first_delivered_at AS previous_first_delivered_at, "
    "locked.previous_last_delivered_at AS previous_last_delivered_at, locked.payload_bytes "
    "AS payload_bytes, locked.trace_bytes AS trace_bytes, locked.payload_bytes + "
    "%(payload_bytes_1)s::INTEGER + locked.trace_bytes AS size, sum(locked.payload_bytes + "
    "%(payload_bytes_1)s::INTEGER + locked.trace_bytes) OVER (ORDER BY locked.priority "
    "DESC, locked.previous_scheduled_at, locked.id ROWS BETWEEN UNBOUNDED PRECEDING AND "
    "CURRENT ROW) AS answer_bytes, sum(locked.payload_bytes) OVER (ORDER BY locked.priority "
    "DESC, locked.previous_scheduled_at, locked.id ROWS BETWEEN UNBOUNDED PRECEDING AND "
    "CURRENT ROW) AS payloads_bytes \nFROM (SELECT candidates.id AS id, candidates.priority "
    "AS priority, candidates.previous_scheduled_at AS previous_scheduled_at, "
    "candidates.previous_lock_id AS previous_lock_id, candidates.previous_deliveries AS "
    "previous_deliveries, candidates.previous_first_delivered_at AS "
    "previous_first_delivered_at, candidates.previous_last_delivered_at AS "
    "previous_last_delivered_at, candidates.payload_bytes AS payload_bytes, "
    "candidates.trace_bytes AS trace_bytes \nFROM (VALUES "
    "(9), (8), (7), (6), (5), (4), (3), (2), (1), (0)) AS priorities (priority) JOIN LATERAL "
    "(SELECT delayed_queue.id AS id, delayed_queue.priority AS priority, "
    'delayed_queue."scheduledAt" AS previous_scheduled_at, delayed_queue."lockUuid" AS '
    "previous_lock_id, delayed_queue.deliveries AS previous_deliveries, "
    'delayed_queue."firstDeliveredAt" AS previous_first_delivered_at, '
    'delayed_queue."lastDeliveredAt" AS previous_last_delivered_at, '
    "length(delayed_queue.payload) AS payload_bytes, "
    "2 * coalesce(length(delayed_queue.trace), 0) AS trace_bytes \nFROM delayed_queue \nWHERE "
    'delayed_queue."pKind" = %(queue)s::VARCHAR AND delayed_queue.priority = '
    'priorities.priority AND delayed_queue."scheduledAt" <= %(now)s::BIGINT AND '
    '(delayed_queue."expiresAt" IS NULL OR delayed_queue."expiresAt" > %(now)s::BIGINT) '
    'ORDER BY delayed_queue."scheduledAt", delayed_queue.id \n LIMIT %(limit)s FOR UPDATE SKIP '
    "LOCKED) AS candidates ON true \n LIMIT %(limit)s) AS locked) AS picked WHERE "
    "delayed_queue.id = picked.id AND (picked.answer_bytes <= %(max_bytes)s::BIGINT OR "
    'picked.answer_bytes = picked.size) RETURNING delayed_queue.id, delayed_queue."pKey", '
    "CASE WHEN (picked.payloads_bytes <= %(payloads_bytes_1)s::INTEGER) THEN "
    "delayed_queue.payload END AS payload, picked.payload_bytes, "
    'picked.previous_scheduled_at, delayed_queue."scheduledAtInitially", '
    'delayed_queue."createdAt", picked.previous_lock_id, picked.previous_deliveries, '
    "picked.previous_first_delivered_at, picked.previous_last_delivered_at, "
    'delayed_queue."deadLetteredFrom", delayed_queue.priority, delayed_queue."messageGroup", '
    'delayed_queue."expiresAt", delayed_queue.trace'
)
# The acknowledgement with HOURGLASS_HISTORY off.
ACKNOWLEDGE = (
    'DELETE FROM delayed_queue WHERE delayed_queue."lockUuid" = %(lock_id)s::VARCHAR AND '
    'delayed_queue."pKind" = %(queue)s::VARCHAR'
)
# The acknowledgement with the delivery history recorded, in one statement.
ACKNOWLEDGE_RECORDED = (
    'WITH gone AS \n(DELETE FROM delayed_queue WHERE delayed_queue."lockUuid" = '
    '%(lock_id)s::VARCHAR AND delayed_queue."pKind" = %(queue)s::VARCHAR RETURNING '
    'delayed_queue."pKind", delayed_queue."pKey", delayed_queue."scheduledAtInitially", '
    'delayed_queue."createdAt", delayed_queue."firstDeliveredAt", '
    'delayed_queue."lastDeliveredAt", delayed_queue.deliveries)\n INSERT INTO '
    'delivery_history (queue, key, "scheduledAt", "createdAt", "firstDeliveredAt", '
    '"lastDeliveredAt", deliveries, outcome, "finishedAt") SELECT gone."pKind", gone."pKey", '
    'gone."scheduledAtInitially", gone."createdAt", gone."firstDeliveredAt", '
    'gone."lastDeliveredAt", gone.deliveries, %(outcome)s::VARCHAR AS anon_1, '
    "%(now)s::BIGINT AS anon_2 \nFROM gone"
)
# The acknowledgement a poll carries (a worker acknowledging on its next poll, decision 21):
# the whole lock, as above, answering the keys it deleted; history off, then on.
ACKNOWLEDGE_KEYS = ACKNOWLEDGE + ' RETURNING delayed_queue."pKey"'
ACKNOWLEDGE_KEYS_RECORDED = (
    'WITH gone AS \n(DELETE FROM delayed_queue WHERE delayed_queue."lockUuid" = '
    '%(lock_id)s::VARCHAR AND delayed_queue."pKind" = %(queue)s::VARCHAR RETURNING '
    'delayed_queue."pKind", delayed_queue."pKey", delayed_queue."scheduledAtInitially", '
    'delayed_queue."createdAt", delayed_queue."firstDeliveredAt", '
    'delayed_queue."lastDeliveredAt", delayed_queue.deliveries), \nrecorded AS \n(INSERT INTO '
    'delivery_history (queue, key, "scheduledAt", "createdAt", "firstDeliveredAt", '
    '"lastDeliveredAt", deliveries, outcome, "finishedAt") SELECT gone."pKind" AS "pKind", '
    'gone."pKey" AS "pKey", gone."scheduledAtInitially" AS "scheduledAtInitially", '
    'gone."createdAt" AS "createdAt", gone."firstDeliveredAt" AS "firstDeliveredAt", '
    'gone."lastDeliveredAt" AS "lastDeliveredAt", gone.deliveries AS deliveries, '
    "%(outcome)s::VARCHAR AS anon_1, %(now)s::BIGINT AS anon_2 \nFROM gone)\n SELECT "
    'gone."pKey" \nFROM gone'
)
_COLUMNS = '"pKey", "pKind", payload, "scheduledAt", "scheduledAtInitially", "createdAt"'
PREFILL = (
    f"INSERT INTO delayed_queue ({_COLUMNS}) "
    "SELECT 'prefill-' || g, %(queue)s, %(payload)s, %(due)s + g, %(due)s + g, %(now)s "
    "FROM generate_series(1, %(count)s) AS g"
)
# The service's session options (app/storage/dialects/postgresql/dialect.py): custom plans.
SESSION_OPTIONS = "-c plan_cache_mode=force_custom_plan"
# Rows per INSERT in a batch, as the store sends them (no lookup of existing keys first:
# docs/decisions/0008-batch-offers-insert-first.md).
INSERT_CHUNK = 200


def fresh_database(dsn: str) -> None:
    """Drop and create the database `dsn` names, through the server's `postgres` database."""
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    admin = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")
    with psycopg.connect(admin, autocommit=True) as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Taken(list):
    """What one poll returned, with the lock that acknowledges it."""

    lock_id: str | None = None


class _HourglassTable:
    """Set-up shared by both targets: the table, emptied and vacuumed, filled by SQL."""

    max_take = 1000

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    async def setup(self) -> None:
        """The service migrates the schema when it starts; nothing to do here."""

    async def clear(self) -> None:
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as connection:
            await connection.execute("TRUNCATE delayed_queue, delivery_history")
            await connection.execute("VACUUM ANALYZE delayed_queue")

    async def prefill(
        self, count: int, payload: bytes, due_in_seconds: float = 0.0, *, vacuum: bool = True
    ) -> None:
        # Due times one millisecond apart, the last one due `due_in_seconds` from now.
        due = now_ms() + round(due_in_seconds * 1000) - count
        async with await psycopg.AsyncConnection.connect(self.dsn, autocommit=True) as connection:
            await connection.execute(
                PREFILL,
                {"queue": QUEUE, "payload": payload, "due": due, "now": now_ms(), "count": count},
            )
            if vacuum:
                await connection.execute("VACUUM ANALYZE delayed_queue")

    async def close(self) -> None:
        pass


class ServiceTarget(_HourglassTable):
    """The running service, over HTTP on loopback."""

    def __init__(
        self, dsn: str, host: str, port: int, pid: int | None = None, name: str = "hourglass"
    ) -> None:
        super().__init__(dsn)
        self.host = host
        self.port = port
        self.pid = pid  # the server's process, for its CPU time
        self.name = name

    async def worker(self, *, ack_on_poll: bool = False) -> ServiceWorker:
        return ServiceWorker(Connection(self.host, self.port), ack_on_poll=ack_on_poll)


class ServiceWorker:
    """One client of the service. With `ack_on_poll`, `finish` leaves the lock to the next
    `take`, whose poll acknowledges it on its way (decision 21): one request per round instead
    of two (`close` acknowledges a lock no poll took along)."""

    def __init__(self, connection: Connection, *, ack_on_poll: bool = False) -> None:
        self.http = connection
        self._messages = f"/v1/queues/{QUEUE}/messages/"
        self.ack_on_poll = ack_on_poll
        self._unacknowledged: str | None = None  # a finished lock for the next poll
        self.lease = LEASE_SECONDS  # each poll's lease, in seconds

    async def offer(self, key: str, payload: bytes) -> None:
        body = b'{"payload":' + payload + b"}"
        await self.http.json("PUT", self._messages + quote(key, safe=""), body, expect=(201,))

    async def offer_batch(
        self, keys: Sequence[str], payload: bytes, traceparent: str | None = None
    ) -> None:
        """Offer `keys` in one batch; with `traceparent`, each is stored with that trace."""
        items = b",".join(
            b'{"key":' + json.dumps(key).encode() + b',"payload":' + payload + b"}" for key in keys
        )
        headers = b"" if traceparent is None else f"traceparent: {traceparent}\r\n".encode()
        await self.http.json(
            "POST", f"/v1/queues/{QUEUE}/batch", b'{"messages":[' + items + b"]}", headers=headers
        )

    async def take(self, limit: int, wait: float = 0) -> Taken:
        body: dict[str, Any] = {"max": limit, "wait": wait, "lease": self.lease}
        acknowledging = self._unacknowledged
        if acknowledging is not None:
            body["ack"] = {"lock_id": acknowledging}
            self._unacknowledged = None
        answer = await self.http.json("POST", f"/v1/queues/{QUEUE}/poll", body)
        # As the DELETE's 204: the lock held what it was given.
        assert acknowledging is None or answer["acknowledged"], answer
        taken = Taken(answer["messages"])
        taken.lock_id = answer["lock_id"]
        return taken

    async def finish(self, taken: Taken) -> None:
        if self.ack_on_poll:
            await self._acknowledge()  # one lock waits for the next poll at a time
            self._unacknowledged = taken.lock_id
        else:
            await self.http.json(
                "DELETE", f"/v1/queues/{QUEUE}/locks/{taken.lock_id}", expect=(204,)
            )

    async def _acknowledge(self) -> None:
        """Acknowledge by itself the lock no poll took along yet, if any."""
        if self._unacknowledged is not None:
            lock_id, self._unacknowledged = self._unacknowledged, None
            await self.http.json("DELETE", f"/v1/queues/{QUEUE}/locks/{lock_id}", expect=(204,))

    async def close(self) -> None:
        await self._acknowledge()
        await self.http.close()


class CeilingTarget(_HourglassTable):
    """The service's statements through psycopg, one autocommit connection per worker."""

    def __init__(self, dsn: str, *, history: bool = True, name: str = "ceiling") -> None:
        super().__init__(dsn)
        self.history = history  # as the service with HOURGLASS_HISTORY on or off
        self.name = name

    async def worker(self, *, ack_on_poll: bool = False) -> CeilingWorker:
        # As the service does (app/storage/dialects/postgresql/dialect.py): custom plans,
        # arrays in binary.
        connection = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, options=SESSION_OPTIONS
        )
        connection.adapters.register_dumper(list, ListBinaryDumper)
        return CeilingWorker(connection, self.history, ack_on_poll=ack_on_poll)


class CeilingWorker:
    """The service's statements for one worker. With `ack_on_poll`, as the service's worker:
    `finish` leaves the lock to the next `take`, which acknowledges it first (the
    statement a poll's acknowledgement sends, answering the keys), then claims."""

    def __init__(
        self,
        connection: psycopg.AsyncConnection,
        history: bool = True,
        *,
        ack_on_poll: bool = False,
    ) -> None:
        self.connection = connection
        self.acknowledge = ACKNOWLEDGE_RECORDED if history else ACKNOWLEDGE
        self.acknowledge_keys = ACKNOWLEDGE_KEYS_RECORDED if history else ACKNOWLEDGE_KEYS
        self.ack_on_poll = ack_on_poll
        self._unacknowledged: str | None = None

    async def offer(self, key: str, payload: bytes) -> None:
        now = now_ms()
        cursor = await self.connection.execute(
            OFFER,
            {
                "pKey": key,
                "pKind": QUEUE,
                "payload": payload,
                "scheduledAt": now,
                "scheduledAtInitially": now,
                "createdAt": now,
                "priority": 0,
                "messageGroup": None,
                "expiresAt": None,
                "trace": None,
            },
        )
        assert await cursor.fetchone() is not None

    async def offer_batch(self, keys: Sequence[str], payload: bytes) -> None:
        now = now_ms()
        async with self.connection.cursor() as cursor:
            for start in range(0, len(keys), INSERT_CHUNK):
                chunk = list(keys[start : start + INSERT_CHUNK])
                rows = len(chunk)
                await cursor.execute(
                    OFFER_ROWS,
                    {
                        "queue": QUEUE,
                        "now": now,
                        "keys": chunk,
                        "payloads": [payload] * rows,
                        "scheduled_ats": [now] * rows,
                        "priorities": [0] * rows,
                        "groups": [None] * rows,
                        "expires_ats": [None] * rows,
                        "traces": [None] * rows,
                    },
                )
                await cursor.fetchall()

    async def take(self, limit: int) -> Taken:
        if self._unacknowledged is not None:
            lock_id, self._unacknowledged = self._unacknowledged, None
            cursor = await self.connection.execute(
                self.acknowledge_keys, self._acknowledging(lock_id)
            )
            assert await cursor.fetchall()
        now = now_ms()
        lock_id = str(uuid.uuid4())
        parameters: dict[str, Any] = {
            "queue": QUEUE,
            "now": now,
            "limit": limit,
            "lock_id": lock_id,
            "lease_until": now + LEASE_SECONDS * 1000,
            "deliveries_1": 1,
        }
        if limit > 1:  # as the service's poll of more than one, with its bound on the answer
            statement = CLAIM_MANY
            parameters["payload_bytes_1"] = POLL_MESSAGE_ENVELOPE_BYTES
            parameters["payloads_bytes_1"] = PAYLOAD_READ_BYTES
            parameters["max_bytes"] = MAX_POLL_BYTES
        else:
            statement = CLAIM_ONE
            parameters["payload_bytes_1"] = PAYLOAD_READ_BYTES
        cursor = await self.connection.execute(statement, parameters)
        taken = Taken(await cursor.fetchall())
        taken.lock_id = lock_id
        return taken

    async def finish(self, taken: Taken) -> None:
        if self.ack_on_poll:
            await self._acknowledge()
            self._unacknowledged = taken.lock_id
        else:
            await self.connection.execute(self.acknowledge, self._acknowledging(taken.lock_id))

    async def _acknowledge(self) -> None:
        if self._unacknowledged is not None:
            lock_id, self._unacknowledged = self._unacknowledged, None
            await self.connection.execute(self.acknowledge, self._acknowledging(lock_id))

    @staticmethod
    def _acknowledging(lock_id: str | None) -> dict[str, Any]:
        return {"lock_id": lock_id, "queue": QUEUE, "now": now_ms(), "outcome": "acknowledged"}

    async def close(self) -> None:
        await self._acknowledge()
        await self.connection.close()
