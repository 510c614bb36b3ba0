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

from bench.http_client import Connection

QUEUE = "bench"
LEASE_SECONDS = 30

_COLUMNS = '"pKey", "pKind", payload, "scheduledAt", "scheduledAtInitially", "createdAt"'
OFFER = (
    f"INSERT INTO delayed_queue ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s) "
    'ON CONFLICT ("pKey", "pKind") DO NOTHING RETURNING "pKey"'
)
OFFER_ROWS = (
    f"INSERT INTO delayed_queue ({_COLUMNS}) "
    "SELECT k, %s, p, s, s, %s FROM unnest(%s::varchar[], %s::bytea[], %s::bigint[]) AS t(k, p, s) "
    'ON CONFLICT ("pKey", "pKind") DO NOTHING RETURNING "pKey"'
)
# The poll as the service sends it for a queue without a delivery limit
# (app/storage/dialects/postgresql.py): the lease and the delivery counts.
CLAIM = (
    'UPDATE delayed_queue SET "scheduledAt" = %(lease_until)s, "lockUuid" = %(lock_id)s, '
    "deliveries = delayed_queue.deliveries + 1, "
    '"firstDeliveredAt" = coalesce(delayed_queue."firstDeliveredAt", %(now)s), '
    '"lastDeliveredAt" = %(now)s '
    'FROM (SELECT id, "scheduledAt" AS previous, deliveries AS previous_deliveries '
    'FROM delayed_queue WHERE "pKind" = %(queue)s AND "scheduledAt" <= %(now)s '
    'ORDER BY "scheduledAt" LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS picked '
    "WHERE delayed_queue.id = picked.id "
    'RETURNING "pKey", payload, picked.previous, "scheduledAtInitially", "createdAt", '
    'picked.previous_deliveries, "deadLetteredFrom"'
)
ACKNOWLEDGE = 'DELETE FROM delayed_queue WHERE "lockUuid" = %(lock_id)s AND "pKind" = %(queue)s'
# The acknowledgement with the delivery history recorded, in one statement.
ACKNOWLEDGE_RECORDED = (
    f"WITH gone AS ({ACKNOWLEDGE} RETURNING "
    '"pKind", "pKey", "scheduledAtInitially", "createdAt", "firstDeliveredAt", '
    '"lastDeliveredAt", deliveries) '
    'INSERT INTO delivery_history (queue, key, "scheduledAt", "createdAt", "firstDeliveredAt", '
    '"lastDeliveredAt", deliveries, outcome, "finishedAt") '
    "SELECT gone.*, 'acknowledged', %(now)s FROM gone"
)
PREFILL = (
    f"INSERT INTO delayed_queue ({_COLUMNS}) "
    "SELECT 'prefill-' || g, %(queue)s, %(payload)s, %(due)s + g, %(due)s + g, %(now)s "
    "FROM generate_series(1, %(count)s) AS g"
)
# Rows per INSERT in a batch (SPEC §2; no lookup of existing keys first: decision 8).
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

    async def worker(self) -> ServiceWorker:
        return ServiceWorker(Connection(self.host, self.port))


class ServiceWorker:
    def __init__(self, connection: Connection) -> None:
        self.http = connection
        self._messages = f"/v1/queues/{QUEUE}/messages/"

    async def offer(self, key: str, payload: bytes) -> None:
        body = b'{"payload":' + payload + b"}"
        await self.http.json("PUT", self._messages + quote(key, safe=""), body, expect=(201,))

    async def offer_batch(self, keys: Sequence[str], payload: bytes) -> None:
        items = b",".join(
            b'{"key":' + json.dumps(key).encode() + b',"payload":' + payload + b"}" for key in keys
        )
        await self.http.json("POST", f"/v1/queues/{QUEUE}/batch", b'{"messages":[' + items + b"]}")

    async def take(self, limit: int, wait: float = 0) -> Taken:
        answer = await self.http.json(
            "POST", f"/v1/queues/{QUEUE}/poll", {"max": limit, "wait": wait, "lease": LEASE_SECONDS}
        )
        taken = Taken(answer["messages"])
        taken.lock_id = answer["lock_id"]
        return taken

    async def finish(self, taken: Taken) -> None:
        await self.http.json("DELETE", f"/v1/queues/{QUEUE}/locks/{taken.lock_id}", expect=(204,))

    async def close(self) -> None:
        await self.http.close()


class CeilingTarget(_HourglassTable):
    """The service's statements through psycopg, one autocommit connection per worker."""

    def __init__(self, dsn: str, *, history: bool = True, name: str = "ceiling") -> None:
        super().__init__(dsn)
        self.history = history  # as the service with HOURGLASS_HISTORY on or off
        self.name = name

    async def worker(self) -> CeilingWorker:
        # As the service does (app/storage/dialects/postgresql.py): custom plans,
        # arrays in binary.
        connection = await psycopg.AsyncConnection.connect(
            self.dsn, autocommit=True, options="-c plan_cache_mode=force_custom_plan"
        )
        connection.adapters.register_dumper(list, ListBinaryDumper)
        return CeilingWorker(connection, self.history)


class CeilingWorker:
    def __init__(self, connection: psycopg.AsyncConnection, history: bool = True) -> None:
        self.connection = connection
        self.acknowledge = ACKNOWLEDGE_RECORDED if history else ACKNOWLEDGE

    async def offer(self, key: str, payload: bytes) -> None:
        now = now_ms()
        cursor = await self.connection.execute(OFFER, (key, QUEUE, payload, now, now, now))
        assert await cursor.fetchone() is not None

    async def offer_batch(self, keys: Sequence[str], payload: bytes) -> None:
        now = now_ms()
        async with self.connection.cursor() as cursor:
            for start in range(0, len(keys), INSERT_CHUNK):
                chunk = list(keys[start : start + INSERT_CHUNK])
                await cursor.execute(
                    OFFER_ROWS, (QUEUE, now, chunk, [payload] * len(chunk), [now] * len(chunk))
                )
                await cursor.fetchall()

    async def take(self, limit: int) -> Taken:
        now = now_ms()
        lock_id = str(uuid.uuid4())
        parameters: dict[str, Any] = {
            "queue": QUEUE,
            "now": now,
            "limit": limit,
            "lock_id": lock_id,
            "lease_until": now + LEASE_SECONDS * 1000,
        }
        cursor = await self.connection.execute(CLAIM, parameters)
        taken = Taken(await cursor.fetchall())
        taken.lock_id = lock_id
        return taken

    async def finish(self, taken: Taken) -> None:
        await self.connection.execute(
            self.acknowledge, {"lock_id": taken.lock_id, "queue": QUEUE, "now": now_ms()}
        )

    async def close(self) -> None:
        await self.connection.close()
