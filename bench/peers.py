"""The peer job queues on PostgreSQL as benchmark targets: pgmq, pgqueuer and procrastinate.

Each peer is driven the way its own client drives it, one connection per worker:

- pgmq: its SQL-only install (`pgmq/sql/pgmq.sql` from the PyPI package), called with
  raw psycopg: `pgmq.send`, `pgmq.send_batch`, `pgmq.read` (vt 30 s), `pgmq.delete`.
- pgqueuer: its `Queries` over `PsycopgDriver`: `enqueue`, `dequeue`, `log_jobs`.
- procrastinate: an `App` per worker (pool of one connection): `defer_async`,
  `batch_defer_async`, `JobManager.fetch_job` (one job per call), `finish_job_by_id_async`.

`prefill` goes through each peer's batch call in chunks of 1000 over a few connections,
except procrastinate's, a direct INSERT (see `ProcrastinateTarget.fill`).

Self-check (creates the database if missing):
    python -m bench.peers postgresql://root@127.0.0.1:5432/hourglass_peers_check
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from typing import TYPE_CHECKING, Any

import psycopg
from pgqueuer.db import PsycopgDriver
from pgqueuer.models import Job as PgqueuerJob
from pgqueuer.queries import EntrypointExecutionParameter, Queries
from pgqueuer.types import QueueEntrypoint, QueueManagerId
from procrastinate import App, PsycopgConnector
from procrastinate.jobs import Job as ProcrastinateJob
from procrastinate.jobs import Status
from procrastinate.tasks import Task

if TYPE_CHECKING:
    from targets import Target

QUEUE = "bench"  # pgmq queue, pgqueuer entrypoint, procrastinate task and queue
VISIBILITY_SECONDS = 30  # pgmq read vt; pgqueuer heartbeat timeout (lease of a taken job)
CHUNK = 1000  # messages per batch call in prefill
PREFILL_CONNECTIONS = 4  # prefill is not measured: chunks go over a few connections at once


async def _connect(dsn: str) -> psycopg.AsyncConnection[Any]:
    return await psycopg.AsyncConnection.connect(dsn, autocommit=True)


class _PeerTarget:
    """Shared plumbing: a lazily opened autocommit admin connection, clear and close."""

    name: str
    max_take: int
    tables: tuple[str, ...]  # everything the peer writes per job, emptied by `clear`

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._admin: psycopg.AsyncConnection[Any] | None = None

    async def admin(self) -> psycopg.AsyncConnection[Any]:
        if self._admin is None or self._admin.closed:
            self._admin = await _connect(self.dsn)
        return self._admin

    async def vacuum(self) -> None:
        """VACUUM (ANALYZE) the peer's tables, as after a clear or a prefill."""
        await (await self.admin()).execute(f"VACUUM (ANALYZE) {', '.join(self.tables)}")

    async def clear(self) -> None:
        await (await self.admin()).execute(f"TRUNCATE {', '.join(self.tables)}")
        await self.vacuum()

    async def prefill(self, count: int, payload: bytes, due_in_seconds: float = 0.0) -> None:
        """`fill` chunks of CHUNK on PREFILL_CONNECTIONS connections, then VACUUM (ANALYZE)."""

        async def lane(first: int) -> None:
            async with await _connect(self.dsn) as connection:
                for start in range(first * CHUNK, count, CHUNK * PREFILL_CONNECTIONS):
                    size = min(CHUNK, count - start)
                    await self.fill(connection, start, size, payload, due_in_seconds)

        await asyncio.gather(*(lane(first) for first in range(PREFILL_CONNECTIONS)))
        await self.vacuum()

    async def fill(
        self, connection: Any, start: int, size: int, payload: bytes, due: float
    ) -> None:
        """Put messages start … start + size - 1 in the queue, in one call."""
        raise NotImplementedError

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None


# -- pgmq ------------------------------------------------------------------------------------


class PgmqTarget(_PeerTarget):
    """pgmq installed from the SQL file of its PyPI package, driven by raw psycopg."""

    name = "pgmq"
    max_take = 1000
    tables = (f"pgmq.q_{QUEUE}", f"pgmq.a_{QUEUE}")  # queue and archive (unused by delete)

    async def setup(self) -> None:
        admin = await self.admin()
        cursor = await admin.execute("SELECT to_regnamespace('pgmq') IS NOT NULL")
        if not (await cursor.fetchone() or (False,))[0]:
            script = files("pgmq").joinpath("sql", "pgmq.sql").read_text(encoding="utf-8")
            async with admin.transaction():
                await admin.execute(script.encode())  # no parameters: run as is
        await admin.execute("SELECT pgmq.create(%s)", (QUEUE,))

    async def fill(
        self, connection: Any, start: int, size: int, payload: bytes, due: float
    ) -> None:
        await connection.execute(
            "SELECT count(*) FROM pgmq.send_batch(%s, %s::jsonb[],"
            " clock_timestamp() + make_interval(secs => %s))",
            (QUEUE, [payload.decode()] * size, due),
        )

    async def worker(self) -> PgmqWorker:
        return PgmqWorker(await _connect(self.dsn))


class PgmqWorker:
    """One autocommit connection; keys are ignored (pgmq has no unique keys)."""

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection

    async def offer(self, key: str, payload: bytes) -> None:
        await self.connection.execute("SELECT pgmq.send(%s, %s::jsonb)", (QUEUE, payload.decode()))

    async def offer_batch(self, keys: Sequence[str], payload: bytes) -> None:
        await self.connection.execute(
            "SELECT count(*) FROM pgmq.send_batch(%s, %s::jsonb[])",
            (QUEUE, [payload.decode()] * len(keys)),
        )

    async def take(self, limit: int) -> Sequence[Any]:
        """Rows of pgmq.message_record: (msg_id, read_ct, enqueued_at, last_read_at, vt, …)."""
        cursor = await self.connection.execute(
            "SELECT * FROM pgmq.read(%s, %s::int, %s::int)", (QUEUE, VISIBILITY_SECONDS, limit)
        )
        return await cursor.fetchall()

    async def finish(self, taken: Sequence[Any]) -> None:
        if taken:
            await self.connection.execute(
                "SELECT count(*) FROM pgmq.delete(%s, %s::bigint[])",
                (QUEUE, [row[0] for row in taken]),
            )

    async def close(self) -> None:
        await self.connection.close()


# -- pgqueuer --------------------------------------------------------------------------------


class PgqueuerTarget(_PeerTarget):
    """pgqueuer's own `Queries` over `PsycopgDriver`, default (durable) install."""

    name = "pgqueuer"
    max_take = 1000
    tables = ("pgqueuer", "pgqueuer_log", "pgqueuer_statistics")
    _tag = ""  # per-prefill prefix of the generated keys

    async def queries(self) -> Queries:
        return Queries(PsycopgDriver(await self.admin()))

    async def setup(self) -> None:
        queries = await self.queries()
        if not await queries.schema_is_installed():
            await queries.install()

    async def prefill(self, count: int, payload: bytes, due_in_seconds: float = 0.0) -> None:
        self._tag = uuid.uuid4().hex[:8]  # fresh keys: a second prefill must not be skipped
        await super().prefill(count, payload, due_in_seconds)

    async def fill(
        self, connection: Any, start: int, size: int, payload: bytes, due: float
    ) -> None:
        await Queries(PsycopgDriver(connection)).enqueue(
            [QUEUE] * size,
            [payload] * size,
            [0] * size,
            [timedelta(seconds=due)] * size,
            [f"prefill-{self._tag}-{start + index}" for index in range(size)],
            on_conflict="skip",
        )

    async def worker(self) -> PgqueuerWorker:
        return PgqueuerWorker(await _connect(self.dsn))


class PgqueuerWorker:
    """One autocommit connection, one queue-manager id.

    Keys become pgqueuer's `dedupe_key` with on_conflict="skip": its natural equivalent of
    a unique key (unique among queued and picked jobs; a repeat is ignored, like Hourglass's
    if_exists=ignore), at the cost of one partial unique index entry per job, as Hourglass pays.
    """

    def __init__(self, connection: psycopg.AsyncConnection[Any]) -> None:
        self.connection = connection
        self.queries = Queries(PsycopgDriver(connection))
        self.manager_id = QueueManagerId(uuid.uuid4())
        self.entrypoints = {QueueEntrypoint(QUEUE): EntrypointExecutionParameter(0)}  # unlimited

    async def offer(self, key: str, payload: bytes) -> None:
        await self.queries.enqueue(QUEUE, payload, dedupe_key=key, on_conflict="skip")

    async def offer_batch(self, keys: Sequence[str], payload: bytes) -> None:
        size = len(keys)
        await self.queries.enqueue(
            [QUEUE] * size, [payload] * size, [0] * size, dedupe_key=list(keys), on_conflict="skip"
        )

    async def take(self, limit: int) -> Sequence[PgqueuerJob]:
        return await self.queries.dequeue(
            batch_size=limit,
            entrypoints=self.entrypoints,
            queue_manager_id=self.manager_id,
            global_concurrency_limit=None,
            heartbeat_timeout=timedelta(seconds=VISIBILITY_SECONDS),
        )

    async def finish(self, taken: Sequence[PgqueuerJob]) -> None:
        """Delete the jobs from the queue table and log each as 'successful' (one statement)."""
        if taken:
            await self.queries.log_jobs([(job, "successful", None) for job in taken])

    async def close(self) -> None:
        await self.connection.close()


# -- procrastinate ---------------------------------------------------------------------------


def _bench_task(**payload: Any) -> None:
    """The task every bench job names; never run, the bench takes and finishes jobs itself."""


async def _open_app(dsn: str) -> tuple[App, Task[Any, Any, Any]]:
    """An opened App on a pool of exactly one connection, with the bench task registered."""
    app = App(connector=PsycopgConnector(conninfo=dsn, min_size=1, max_size=1))
    task = app.task(name=QUEUE, queue=QUEUE)(_bench_task)
    await app.open_async()
    return app, task


class ProcrastinateTarget(_PeerTarget):
    """procrastinate 3.x: jobs are JSON task kwargs (the payload object itself)."""

    name = "procrastinate"
    max_take = 1  # fetch_job claims one job per call
    tables = ("procrastinate_jobs", "procrastinate_events", "procrastinate_periodic_defers")

    async def setup(self) -> None:
        app, _ = await _open_app(self.dsn)
        try:
            if not await app.check_connection_async():  # False until procrastinate_jobs exists
                await app.schema_manager.apply_schema_async()
        finally:
            await app.close_async()

    async def fill(
        self, connection: Any, start: int, size: int, payload: bytes, due: float
    ) -> None:
        """A direct INSERT, equivalent to `batch_defer_async`: its procrastinate_defer_jobs_v1 is
        an INSERT … SELECT of these columns (the same row triggers fire: a 'deferred' event, a
        NOTIFY, a 'scheduled' event when scheduled_at is set). The client's per-job Python
        work would otherwise take 3-4 times as long as the database."""
        scheduled_at = datetime.now(UTC) + timedelta(seconds=due) if due > 0 else None
        await connection.execute(
            "INSERT INTO procrastinate_jobs (queue_name, task_name, args, scheduled_at)"
            " SELECT %s, %s, %s::jsonb, %s FROM generate_series(1, %s)",
            (QUEUE, QUEUE, payload.decode(), scheduled_at, size),
        )

    async def worker(self) -> ProcrastinateWorker:
        app, task = await _open_app(self.dsn)
        return ProcrastinateWorker(app, task, await app.job_manager.register_worker())


class ProcrastinateWorker:
    """Its own App and one-connection pool, registered as a procrastinate worker.

    Keys are ignored: procrastinate's nearest notion, `queueing_lock`, raises AlreadyEnqueued
    (failing a whole batch) instead of ignoring a repeat.
    """

    def __init__(self, app: App, task: Task[Any, Any, Any], worker_id: int) -> None:
        self.app, self.task, self.worker_id = app, task, worker_id

    async def offer(self, key: str, payload: bytes) -> None:
        await self.task.defer_async(**json.loads(payload))

    async def offer_batch(self, keys: Sequence[str], payload: bytes) -> None:
        kwargs = json.loads(payload)
        await self.task.batch_defer_async(*[kwargs] * len(keys))

    async def take(self, limit: int) -> Sequence[ProcrastinateJob]:
        job = await self.app.job_manager.fetch_job(queues=[QUEUE], worker_id=self.worker_id)
        return [job] if job is not None else []

    async def finish(self, taken: Sequence[ProcrastinateJob]) -> None:
        """Mark succeeded and delete the job (delete_job=True; its events cascade away)."""
        for job in taken:
            assert job.id is not None
            await self.app.job_manager.finish_job_by_id_async(
                job_id=job.id, status=Status.SUCCEEDED, delete_job=True
            )

    async def close(self) -> None:
        await self.app.job_manager.unregister_worker(self.worker_id)
        await self.app.close_async()


PEERS: dict[str, Callable[[str], Target]] = {
    "pgmq": PgmqTarget,
    "pgqueuer": PgqueuerTarget,
    "procrastinate": ProcrastinateTarget,
}


# -- self-check ------------------------------------------------------------------------------

CHECK_DSN = "postgresql://root@127.0.0.1:5432/hourglass_peers_check"


async def _ensure_database(dsn: str) -> None:
    name = psycopg.conninfo.conninfo_to_dict(dsn)["dbname"]
    server = psycopg.conninfo.make_conninfo(dsn, dbname="postgres")
    async with await _connect(server) as connection:
        cursor = await connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if await cursor.fetchone() is None:
            await connection.execute(f'CREATE DATABASE "{name}"')


async def _drain(target: Any, workers: int = 4) -> list[Any]:
    """Take and finish until empty with `workers` concurrent workers; the ids taken."""
    limit, opened = min(100, target.max_take), [await target.worker() for _ in range(workers)]

    async def run(worker: Any) -> list[Any]:
        ids: list[Any] = []
        while taken := await worker.take(limit):
            ids.extend(item.id if hasattr(item, "id") else item[0] for item in taken)
            await worker.finish(taken)
        return ids

    try:
        return [i for ids in await asyncio.gather(*map(run, opened)) for i in ids]
    finally:
        for worker in opened:
            await worker.close()


async def _check(name: str, dsn: str, payload: bytes) -> None:
    target, timings = PEERS[name](dsn), []

    async def step(label: str, coroutine: Any) -> Any:
        started = time.perf_counter()
        result = await coroutine
        timings.append(f"{label} {time.perf_counter() - started:.2f}s")
        return result

    try:
        await step("setup", target.setup())
        await step("setup again", target.setup())
        await step("clear", target.clear())
        producer = await target.worker()

        async def offer_ten() -> None:
            for index in range(10):
                await producer.offer(f"k{index}", payload)

        await step("offer×10", offer_ten())
        batch = [f"b{index}" for index in range(1000)]
        await step("offer_batch×1000", producer.offer_batch(batch, payload))
        await producer.close()
        taken = await step("drain 1010", _drain(target))
        assert len(taken) == len(set(taken)) == 1010, (len(taken), len(set(taken)))
        await step("prefill 5000", target.prefill(5000, payload))
        taken = await step("drain 5000", _drain(target))
        assert len(taken) == len(set(taken)) == 5000, (len(taken), len(set(taken)))
        await step("prefill 100 due in 1h", target.prefill(100, payload, due_in_seconds=3600))
        assert await _drain(target, workers=1) == [], "a message due in an hour was taken"
        await step("clear", target.clear())
    finally:
        await target.close()
    print(f"{name:>13}: ok  " + ", ".join(timings))


async def _main(dsn: str) -> None:
    await _ensure_database(dsn)
    payload = json.dumps({"user": 123456, "text": "x" * 80}, separators=(",", ":")).encode()
    for name in PEERS:
        await _check(name, dsn, payload)


if __name__ == "__main__":
    # procrastinate warns when an App is created from __main__ (here, only in the self-check).
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    asyncio.run(_main(sys.argv[1] if len(sys.argv) > 1 else CHECK_DSN))
