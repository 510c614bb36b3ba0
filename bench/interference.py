"""Two workloads users ask about: what one queue's backlog does to another
queue's polls (a noisy neighbour), and what a transaction left open does to a drain
(a held snapshot)."""

from __future__ import annotations

import asyncio
import re
import time
import urllib.request
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import psycopg

from app.metrics.gauges import QUEUE_GAUGES_SECONDS
from bench.accounting import percentile
from bench.hourglass import QUEUE, ServiceTarget, ServiceWorker, now_ms
from bench.report import Measurement, Row
from bench.targets import PAYLOAD, Target
from bench.workloads import Bench

NEIGHBOUR = "neighbour"  # queue A; queue B is bench.hourglass.QUEUE, which the workers poll
WARM_UP_POLLS = 10
SNAPSHOT_WORKERS = 4
SNAPSHOT_LIMIT = 100
SNAPSHOT_STARTS_AT = 0.25  # of the drain's messages delivered when the snapshot is taken
HOLDER_CHECK_SECONDS = 0.25  # how often the hold looks whether the server ended its session
IDLE_TIMEOUT_SECONDS = 10  # the idle-timeout lever's idle_in_transaction_session_timeout
RELOAD_SECONDS = 5.0  # how long --server-autovacuum waits for the server to take it
LONG_LEASE_SECONDS = 600  # the lease-beyond-hold lever's leases
GAUGES_FRESH_SECONDS = QUEUE_GAUGES_SECONDS + 0.5  # a scrape then shows a reading made since


async def noisy_neighbour(bench: Bench) -> None:
    """Queue B's poll max=1 + ack latency beside queue A's ready messages, against B alone."""
    plan = bench.plan
    targets: list[Target] = [bench.service, bench.ceiling]

    async def latency(target: Target) -> dict[str, Measurement]:
        await _refill_quiet_queue(bench.dsn, target, plan.neighbour_quiet)
        worker = await target.worker()
        for _ in range(WARM_UP_POLLS):
            await worker.finish(await worker.take(1))
        timings: list[float] = []
        bench.cpu.start()
        for _ in range(plan.neighbour_polls):
            started = time.perf_counter()
            taken = await worker.take(1)
            await worker.finish(taken)
            timings.append(time.perf_counter() - started)
            if not taken:  # B must hold more than the polls take: each one times a claim
                raise RuntimeError("queue B ran out of messages: raise neighbour_quiet")
        cpu = bench.cpu.stop()
        await worker.close()
        return {
            ": p50 ms": Measurement(percentile(timings, 0.5) * 1000, cpu),
            ": p99 ms": Measurement(percentile(timings, 0.99) * 1000, cpu),
        }

    quiet = f"noisy neighbour: queue B ({plan.neighbour_quiet:,} ready) poll max=1 + ack"
    await bench.service.clear()
    alone = await bench.compare(f"{quiet}, B alone", "ms", latency, targets)
    beside_what = f"{plan.neighbour_ready:,} ready in queue A"
    await _fill_neighbour(bench.dsn, plan.neighbour_ready)
    beside = await bench.compare(f"{quiet}, beside {beside_what}", "ms", latency, targets)
    for with_a, without_a in zip(beside, alone, strict=True):
        label = with_a.name.rsplit(": ", 1)[1].removesuffix(" ms")
        bench._add(
            Row(
                f"noisy neighbour: queue B beside {beside_what} / B alone: {label}",
                "x",
                _ratio(with_a.service, without_a.service),
                _ratio(with_a.ceiling, without_a.ceiling),
                {},
            )
        )
    await bench.service.clear()  # a million rows would weigh on the workloads after this one


async def _refill_quiet_queue(dsn: str, target: Target, count: int) -> None:
    """Queue B holds `count` ready messages and nothing else, the table vacuumed."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute('DELETE FROM delayed_queue WHERE "pKind" = %s', (QUEUE,))
    await target.prefill(count, PAYLOAD)  # vacuums and analyses the table


async def _fill_neighbour(dsn: str, count: int) -> None:
    """`count` messages in queue A, due from `count` ms ago up to now, in one statement."""
    due = now_ms() - count
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        await connection.execute(
            "INSERT INTO delayed_queue "
            '("pKey", "pKind", payload, "scheduledAt", "scheduledAtInitially", "createdAt") '
            "SELECT 'ready-' || g, %(queue)s, %(payload)s, %(due)s + g, %(due)s + g, %(now)s "
            "FROM generate_series(1, %(count)s) AS g",
            {"queue": NEIGHBOUR, "payload": PAYLOAD, "due": due, "now": now_ms(), "count": count},
        )
        await connection.execute("VACUUM ANALYZE delayed_queue")


Statement = Callable[[psycopg.AsyncConnection], Awaitable[object]]


async def _nothing(connection: psycopg.AsyncConnection) -> None:
    pass


def _statements(*sql: str) -> Statement:
    async def run(connection: psycopg.AsyncConnection) -> None:
        for statement in sql:
            await connection.execute(statement)

    return run


# The queue table's autovacuum storage parameters (migration 0002 sets them).
_TABLE_AUTOVACUUM = (
    "autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold, "
    "autovacuum_vacuum_insert_scale_factor, autovacuum_vacuum_insert_threshold, "
    "autovacuum_analyze_scale_factor, autovacuum_analyze_threshold, "
    "autovacuum_vacuum_cost_delay"
)
_TABLE_AUTOVACUUM_AGGRESSIVE = (
    "autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 100, "
    "autovacuum_vacuum_insert_scale_factor = 0, autovacuum_vacuum_insert_threshold = 100, "
    "autovacuum_analyze_scale_factor = 0, autovacuum_analyze_threshold = 100, "
    "autovacuum_vacuum_cost_delay = 0"
)


@dataclass(frozen=True)
class Lever:
    """One thing the field does about held snapshots, set up on the queue table before
    the workload (whose TRUNCATE gives it fresh pages); the table's storage parameters
    are put back as they were after it."""

    name: str
    what: str
    apply: Statement = _nothing
    holder_options: str = ""  # the holding session's options, as its role's settings would be
    hold_ends_itself: bool = False  # the server may end the hold first
    lease_seconds: int | None = None  # the workers' leases, when not bench's own


LEVERS = {
    lever.name: lever
    for lever in (
        Lever("none", "the table as migrated (0002: autovacuum at 1,000 dead rows + 1%)"),
        Lever(
            "table-defaults",
            "the table's autovacuum settings back to the server's defaults (20% of the rows)",
            _statements(f"ALTER TABLE delayed_queue RESET ({_TABLE_AUTOVACUUM})"),
        ),
        Lever(
            "autovacuum-aggressive",
            "the table's autovacuum after 100 dead rows, whatever the table's size "
            "(the server's naptime, 1 min by default, still sets how often it looks)",
            _statements(f"ALTER TABLE delayed_queue SET ({_TABLE_AUTOVACUUM_AGGRESSIVE})"),
        ),
        Lever(
            "fillfactor-70",
            "fillfactor 70: 30% of each page left free for updated row versions",
            _statements("ALTER TABLE delayed_queue SET (fillfactor = 70)"),
        ),
        Lever(
            "lease-beyond-hold",
            f"leases of {LONG_LEASE_SECONDS} s, longer than the hold: an acknowledged "
            "message's last index entry (at its lease's end) stays beyond every claim's "
            "range while the snapshot is held, as if acknowledged rows were kept out of it",
            lease_seconds=LONG_LEASE_SECONDS,
        ),
        Lever(
            "idle-timeout",
            f"the holding role's idle_in_transaction_session_timeout at "
            f"{IDLE_TIMEOUT_SECONDS} s (ALTER ROLE … SET): the server ends the hold",
            holder_options=f"-c idle_in_transaction_session_timeout={IDLE_TIMEOUT_SECONDS}s",
            hold_ends_itself=True,
        ),
    )
}


async def _storage_parameters(connection: psycopg.AsyncConnection) -> list[str]:
    """The queue table's storage parameters, as `name=value` each."""
    cursor = await connection.execute(
        "SELECT coalesce(reloptions, '{}') FROM pg_class WHERE oid = 'delayed_queue'::regclass"
    )
    row = await cursor.fetchone()
    assert row is not None
    return list(row[0])


async def _restore_storage_parameters(
    connection: psycopg.AsyncConnection, saved: list[str]
) -> None:
    """Put the queue table's storage parameters back to `saved`, whatever a lever set."""
    if now := await _storage_parameters(connection):
        names = ", ".join(option.split("=", 1)[0] for option in now)
        await connection.execute(f"ALTER TABLE delayed_queue RESET ({names})")
    if saved:
        await connection.execute(f"ALTER TABLE delayed_queue SET ({', '.join(saved)})")


async def server_autovacuum(dsn: str, on: bool | None) -> Callable[[], Awaitable[None]]:
    """Turn the server's autovacuum on or off (None: leave it) for the run, through
    ALTER SYSTEM and a reload, and see it take; answer what puts it back as it was."""
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        setting, source = await _autovacuum_setting(connection)
        if on is None or (setting == "on") == on:
            print(f"server autovacuum: {setting}", flush=True)

            async def unchanged() -> None:
                pass

            return unchanged
        if source is None:  # pg_settings hides where it comes from without the privilege
            raise RuntimeError("--server-autovacuum: cannot read where autovacuum is set")
        wanted = "on" if on else "off"

        async def put_back() -> None:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as again:
                if source.endswith("postgresql.auto.conf"):
                    await again.execute(f"ALTER SYSTEM SET autovacuum = {setting}")
                else:
                    await again.execute("ALTER SYSTEM RESET autovacuum")
                await again.execute("SELECT pg_reload_conf()")
            print(f"server autovacuum: back to {setting}", flush=True)

        await connection.execute(f"ALTER SYSTEM SET autovacuum = {wanted}")
        await connection.execute("SELECT pg_reload_conf()")
        # The reload is signalled, not waited for; a setting given on the server's
        # command line wins over ALTER SYSTEM. New sessions show what holds.
        deadline = time.monotonic() + RELOAD_SECONDS
        while True:
            async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as fresh:
                if (await _autovacuum_setting(fresh))[0] == wanted:
                    break
            if time.monotonic() > deadline:
                await put_back()
                raise RuntimeError(f"--server-autovacuum: the server did not take {wanted}")
            await asyncio.sleep(0.1)
        print(f"server autovacuum: {wanted} for this run (was {setting})", flush=True)
    return put_back


async def _autovacuum_setting(connection: psycopg.AsyncConnection) -> tuple[str, str | None]:
    cursor = await connection.execute(
        "SELECT setting, sourcefile FROM pg_settings WHERE name = 'autovacuum'"
    )
    row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1]


@dataclass(frozen=True)
class _Poll:
    finished: float  # perf_counter when its acknowledgement returned
    latency: float  # seconds the poll took
    messages: int


async def held_snapshot(bench: Bench, lever: Lever = LEVERS["none"]) -> None:
    """A drain with max=100 and 4 workers; once a quarter of it is delivered, another
    connection takes a snapshot (REPEATABLE READ, one read) and holds it for
    plan.snapshot_hold seconds (or until the server ends its session, under a lever that
    bounds it). Throughput and poll latency before, during and after the hold, the
    table's dead tuples at its start, at its end and after the drain, and the service's
    own gauges (/metrics) beside them. If less than a quarter of the messages is left
    after the hold, "after" is a second drain of a quarter of them, offered once the
    hold is over. `lever` is set up on the emptied table first, and the table's storage
    parameters are put back at the end."""
    service = bench.service
    await service.clear()
    async with await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as connection:
        await connection.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        saved = await _storage_parameters(connection)
        await lever.apply(connection)
    try:
        await _held_snapshot(bench, lever)
    finally:
        async with await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as connection:
            await _restore_storage_parameters(connection, saved)


async def _held_snapshot(bench: Bench, lever: Lever) -> None:
    plan = bench.plan
    service = bench.service
    await service.prefill(plan.snapshot_messages, PAYLOAD)
    autovacuums_before = await _autovacuum_count(bench.dsn)
    workers = [await _worker(service, lever) for _ in range(SNAPSHOT_WORKERS)]
    polls: list[_Poll] = []
    delivered = 0
    quarter_delivered = asyncio.Event()

    async def drain(worker) -> None:
        nonlocal delivered
        try:
            while True:
                started = time.perf_counter()
                taken = await worker.take(SNAPSHOT_LIMIT)
                latency = time.perf_counter() - started
                if not taken:
                    return
                await worker.finish(taken)
                delivered += len(taken)
                polls.append(_Poll(time.perf_counter(), latency, len(taken)))
                if delivered >= plan.snapshot_messages * SNAPSHOT_STARTS_AT:
                    quarter_delivered.set()
        finally:
            quarter_delivered.set()  # a drain that ended early must not leave the hold waiting

    dead: dict[str, tuple[int, int]] = {}
    gauges: dict[str, dict[str, float]] = {}
    metrics_url = f"http://{service.host}:{service.port}/metrics"

    async def hold() -> tuple[float, float]:
        # Not `async with` for the holder: leaving that block commits, and under a lever
        # that ends the hold the server has closed the session by then.
        holder = await psycopg.AsyncConnection.connect(bench.dsn, options=lever.holder_options)
        try:
            async with await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as sampler:
                return await hold_with(holder, sampler)
        finally:
            await holder.close()

    async def hold_with(
        holder: psycopg.AsyncConnection, sampler: psycopg.AsyncConnection
    ) -> tuple[float, float]:
        await holder.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        holder_pid = holder.info.backend_pid
        await quarter_delivered.wait()  # connected beforehand: the snapshot comes at once
        await holder.execute("SELECT 1 FROM delayed_queue LIMIT 1")  # the snapshot
        began = time.perf_counter()
        dead["at the hold's start"] = await _dead_tuples(sampler)
        # /metrics reads the database at most every QUEUE_GAUGES_SECONDS: what it shows of
        # the hold is read once a fresh reading is sure to have come after its start.
        seen = asyncio.create_task(_gauges(metrics_url, after=GAUGES_FRESH_SECONDS))
        # The hold itself: its length is the point, whatever the samples took; under a
        # lever that bounds it, it ends when the server ends the holding session.
        deadline = began + plan.snapshot_hold
        ended_by_server = False
        while (left := deadline - time.perf_counter()) > 0:
            await asyncio.sleep(min(left, HOLDER_CHECK_SECONDS))
            if lever.hold_ends_itself and not await _session_alive(sampler, holder_pid):
                ended_by_server = True
                break
        ended = time.perf_counter()
        dead["at the hold's end"] = await _dead_tuples(sampler)
        if seen.done():  # a hold shorter than that (--quick) is not kept open for it
            gauges[f"{GAUGES_FRESH_SECONDS:g} s into the hold"] = seen.result()
        else:
            seen.cancel()
        gauges[f"at the hold's end (read up to {QUEUE_GAUGES_SECONDS:g} s before)"] = await _gauges(
            metrics_url
        )
        if ended_by_server:
            print(f"the server ended the hold after {ended - began:.1f} s", flush=True)
        else:
            await holder.commit()
        return began, ended

    started = time.perf_counter()
    holding = asyncio.create_task(hold())
    await asyncio.gather(*(drain(worker) for worker in workers))
    drained = time.perf_counter()
    began, ended = await holding
    during = (began, min(ended, drained))
    # A drain that ended inside the hold (or just after it) leaves little or nothing to
    # time after it: a quarter of the messages again, offered into the table as the hold
    # left it (no vacuum), drained the same way, show whether the drain recovers.
    refilled = 0
    after = (ended, drained)
    await asyncio.gather(*(worker.close() for worker in workers))
    quarter = round(plan.snapshot_messages * SNAPSHOT_STARTS_AT)
    if sum(poll.messages for poll in polls if poll.finished >= ended) < quarter:
        refilled = quarter
        await service.prefill(refilled, PAYLOAD, vacuum=False)
        # New connections: the server closes keep-alive ones idle for seconds.
        workers = [await _worker(service, lever) for _ in range(SNAPSHOT_WORKERS)]
        after_started = time.perf_counter()
        await asyncio.gather(*(drain(worker) for worker in workers))
        after = (after_started, time.perf_counter())
        await asyncio.gather(*(worker.close() for worker in workers))
    async with await psycopg.AsyncConnection.connect(bench.dsn, autocommit=True) as sampler:
        dead["after the drain"] = await _dead_tuples(sampler)
    if plan.snapshot_hold >= GAUGES_FRESH_SECONDS:  # --quick: no wait for a fresh reading
        gauges["after the drain"] = await _gauges(metrics_url, after=GAUGES_FRESH_SECONDS)
    autovacuums = await _autovacuum_count(bench.dsn) - autovacuums_before

    print(f"held snapshot, lever {lever.name}: {lever.what}", flush=True)
    _print_timeline(polls, started, began, ended)
    name = f"held snapshot, {plan.snapshot_hold:g} s in a drain of {plan.snapshot_messages:,}"
    if lever.name != "none":
        name += f", lever {lever.name}"
    windows = {"before": (started, began), "during": during, "after": after}
    for window, (start, end) in windows.items():
        inside = [poll for poll in polls if start <= poll.finished < end]
        throughput = sum(poll.messages for poll in inside) / (end - start) if inside else None
        bench._add(Row(f"{name}: drain {window}", "msg/s", throughput, None, {}))
    for window, (start, end) in windows.items():
        latencies = [poll.latency for poll in polls if start <= poll.finished < end]
        for fraction in (0.5, 0.99):
            bench._add(
                Row(
                    f"{name}: poll max={SNAPSHOT_LIMIT} p{fraction * 100:g} {window}",
                    "ms",
                    percentile(latencies, fraction) * 1000 if latencies else None,
                    None,
                    {},
                )
            )
    for point, (statistics, counted) in dead.items():
        bench._add(Row(f"{name}: dead tuples {point} (n_dead_tup)", "rows", statistics, None, {}))
        bench._add(Row(f"{name}: dead tuples {point} (pgstattuple)", "rows", counted, None, {}))
    for point, shown in gauges.items():
        for gauge, value in shown.items():
            bench._add(Row(f"{name}: /metrics {gauge} {point}", "", value, None, {}))
    bench._add(Row(f"{name}: hold's length", "s", ended - began, None, {}))
    bench._add(Row(f"{name}: drain's length", "s", drained - started, None, {}))
    bench._add(Row(f"{name}: messages offered again after the hold", "msgs", refilled, None, {}))
    bench._add(Row(f"{name}: autovacuums of the table", "runs", autovacuums, None, {}))


async def _worker(service: ServiceTarget, lever: Lever) -> ServiceWorker:
    worker = await service.worker()
    if lever.lease_seconds is not None:
        worker.lease = lever.lease_seconds
    return worker


# The gauges an operator would look at (app/metrics/table_health.py), by the line /metrics shows.
_GAUGES = {
    "held back seconds": re.compile(
        r'^hourglass_vacuum_held_back_seconds\{kind="transaction"\} (\S+)$', re.MULTILINE
    ),
    "held back transactions": re.compile(
        r'^hourglass_vacuum_held_back_transactions\{kind="transaction"\} (\S+)$', re.MULTILINE
    ),
    "dead rows": re.compile(
        r'^hourglass_table_rows\{(?=[^}]*state="dead")(?=[^}]*table="delayed_queue")[^}]*\} '
        r"(\S+)$",
        re.MULTILINE,
    ),
}


async def _gauges(url: str, after: float = 0.0) -> dict[str, float]:
    """The table-health gauges as a scrape of the service shows them `after` seconds."""
    await asyncio.sleep(after)

    def scrape() -> str:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.read().decode()

    text = await asyncio.to_thread(scrape)
    return {
        gauge: float(match.group(1))
        for gauge, pattern in _GAUGES.items()
        if (match := pattern.search(text))
    }


async def _session_alive(connection: psycopg.AsyncConnection, pid: int) -> bool:
    cursor = await connection.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,))
    return await cursor.fetchone() is not None


async def _autovacuum_count(dsn: str) -> int:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
        cursor = await connection.execute(
            "SELECT autovacuum_count FROM pg_stat_user_tables WHERE relname = 'delayed_queue'"
        )
        row = await cursor.fetchone()
        return int(row[0]) if row else 0


def _print_timeline(polls: list[_Poll], started: float, began: float, ended: float) -> None:
    """The drain in slices of a tenth of the hold (at least a second), for the eye: not rows."""
    step = max(1.0, (ended - began) / 10)
    print(f"held snapshot timeline (s from the hold's start; it ends at {ended - began:.1f}):")
    last = max((poll.finished for poll in polls), default=started)
    slice_start = started
    while slice_start < last:
        inside = [poll for poll in polls if slice_start <= poll.finished < slice_start + step]
        if inside:
            print(
                f"  {slice_start - began:+7.1f} s: "
                f"{sum(poll.messages for poll in inside) / step:8,.0f} msg/s, poll p50 "
                f"{percentile([poll.latency for poll in inside], 0.5) * 1000:7.1f} ms",
                flush=True,
            )
        slice_start += step


async def _dead_tuples(connection: psycopg.AsyncConnection) -> tuple[int, int]:
    """The table's dead tuples as the statistics views have them (backends report them
    every second or so) and as pgstattuple counts them in the pages."""
    cursor = await connection.execute(
        "SELECT (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relname = 'delayed_queue'), "
        "dead_tuple_count FROM pgstattuple('delayed_queue')"
    )
    row = await cursor.fetchone()
    assert row is not None
    return row[0], row[1]


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    return numerator / denominator if numerator is not None and denominator else None
