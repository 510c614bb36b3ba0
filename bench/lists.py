"""A page of a list from a queue of 1,000,000 messages (and 1,000,000 history rows)
against the same page of a small queue and of an empty one: a page costs what its
rows cost, whatever the queue's size (docs/decisions/0013-list-pages.md)?

    python -m bench.lists                       # PostgreSQL, 200 requests a case, ~5 minutes
    python -m bench.lists --database-url mariadb://root@127.0.0.1:3306/hourglass_bench_lists
    python -m bench.lists --explain             # each list statement's plan (decision 13)
    python -m bench.lists --quick --drop        # 10,000 messages, 5 requests: does it run?

Two databases: `<name>` holds queue `orders` with --messages messages and as many
history rows, and queue `other` with a fifth of that (and a tenth in history);
`<name>_small` holds the same with 10,000 messages. Both are filled once with
INSERT … SELECT on the server (generate_series, or MariaDB's seq_1_to_N), analysed,
and kept: a later run reuses them (--refill builds them anew, --drop drops them at
the end). In `orders`, by due
time: 30% due in the last minutes (ready), 10% due in the next minutes, 40% due
in one millisecond a week ahead (an import at 09:00), 20% after it, and 20
messages leased until nine days ahead (behind every other message in due order);
keys are `cNNN/NNNNNNN` (with `c007/` a prefix of 1,000 keys in both databases).
History: one row in 200 dead-lettered, one in 50 dropped, ten rows per key, and
rows finished in the same millisecond a hundred at a time.

Each case is one page of 50, sent in turn to the full queue, the small queue and
an empty queue (`nothing`, in the small database), round by round (each going
first in turn), so a busy moment of the machine (2 shared cores) slows all three
alike; the first round is not counted. Cursors start from the middle of the full
queue (inside the import's millisecond) and of the small one. Timed twice: through
the store (`Storage.lists`, what the list costs the database and the store), and
over HTTP against three `hourglass serve`, one per queue. The figure is each
case's median. Two ratios: the full queue's median over the small queue's (the
same page, the same rows, from 100 times fewer messages), and over the empty
queue's, which the target is set on (at most 1.5x; an empty queue's page has no
rows: the second ratio also holds what 50 rows cost to read and render).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from sqlalchemy import create_engine, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ClauseElement, Executable, Select

from app.config import Settings, normalize_database_url
from app.domain.messages import Finish
from app.domain.pages import (
    DuePosition,
    HistoryPosition,
    KeyPosition,
    ListState,
    encode_cursor,
)
from app.storage.blocking import create_blocking_storage
from app.storage.schema import upgrade_to_head
from app.storage.store import Storage
from bench.http_client import Connection as HttpConnection
from bench.http_client import event_loop_factory
from tests.support.server import running_server

QUEUE = "orders"
OTHER = "other"
EMPTY = "nothing"
PAGE = 50
SMALL_MESSAGES = 10_000
LEASED = 20
DAY_MS = 86_400_000
PAYLOAD = b'{"customer": "c007", "amount": 1250, "currency": "EUR", "note": "about 100 bytes"}'
PREFIX = "c007/"  # 1,000 keys in either database (see _key_groups)
NO_PREFIX = "c007/5x"  # between two keys: none has it
WIDE_PREFIX = "c"  # every key of the queue
HISTORY_KEY = "c007/0000007"  # ten rows in either database
CHUNK = 200_000  # rows per INSERT … SELECT


def _key_groups(messages: int) -> int:
    """How many key prefixes `cNNN/` a queue of `messages` has: 1,000 keys each."""
    return max(1, messages // 1000)


@dataclass(frozen=True)
class Filled:
    """What one database holds (read back from its marker table)."""

    messages: int
    filled_at: int  # ms: the fill's "now"


def _history_parameters(groups: int, rows: int) -> dict[str, int]:
    return {"groups": groups, "rows": rows, "keys": rows // 10}


# --- filling ----------------------------------------------------------------------

_SQL = {
    "postgresql": {
        "numbers": "generate_series(CAST(:low AS BIGINT), CAST(:high AS BIGINT)) AS numbers(n)",
        "key": "'c' || lpad((n % :groups)::text, 3, '0') || '/' || lpad(({n})::text, 7, '0')",
        "other_key": "'o/' || lpad(n::text, 7, '0')",
    },
    "mariadb": {
        "numbers": "(SELECT seq AS n FROM seq_{low}_to_{high}) AS numbers",
        "key": "CONCAT('c', LPAD(n % :groups, 3, '0'), '/', LPAD({n}, 7, '0'))",
        "other_key": "CONCAT('o/', LPAD(n, 7, '0'))",
    },
}


def _backend(url: str) -> str:
    name = make_url(url).get_backend_name()
    return "mariadb" if name in ("mysql", "mariadb") else name


def _q(backend: str, name: str) -> str:
    return f"`{name}`" if backend == "mariadb" else f'"{name}"'


def _fill(url: str, messages: int) -> Filled:
    """Fill a fresh, migrated database: `orders` with `messages` messages and as many
    history rows, `other` with a fifth of that and a tenth in history."""
    backend = _backend(url)
    q = lambda name: _q(backend, name)
    forms = _SQL[backend]
    now = time.time_ns() // 1_000_000
    ready, soon, imported = messages * 3 // 10, messages * 4 // 10, messages * 8 // 10
    lease_every = max(1, messages // LEASED)
    leased = f"(n % {lease_every} = {lease_every // 2})"
    due = (
        f"CASE WHEN n <= {ready} THEN {now - ready - 1000} + n "
        f"WHEN n <= {soon} THEN {now + 60_000} + n "
        f"WHEN n <= {imported} THEN {now + 7 * DAY_MS} "
        f"ELSE {now + 8 * DAY_MS} + n END"
    )
    message_columns = ", ".join(
        q(name)
        for name in (
            "pKey",
            "pKind",
            "payload",
            "scheduledAt",
            "scheduledAtInitially",
            "createdAt",
            "lockUuid",
            "deliveries",
            "firstDeliveredAt",
            "lastDeliveredAt",
        )
    )
    lease_id = "CONCAT('bench-lease-', n)" if backend == "mariadb" else "'bench-lease-' || n"
    orders = (
        f"INSERT INTO delayed_queue ({message_columns}) "
        f"SELECT {forms['key'].format(n='n')}, :queue, :payload, "
        f"CASE WHEN {leased} THEN {now + 9 * DAY_MS} ELSE {due} END, {due}, {now - 3_600_000}, "
        f"CASE WHEN {leased} THEN {lease_id} END, CASE WHEN {leased} THEN 1 ELSE 0 END, "
        f"CASE WHEN {leased} THEN {now - 60_000} END, CASE WHEN {leased} THEN {now - 60_000} END "
        f"FROM {forms['numbers']}"
    )
    others = (
        f"INSERT INTO delayed_queue ({message_columns}) "
        f"SELECT {forms['other_key']}, :queue, :payload, {now - 1000} - n, {now - 1000} - n, "
        f"{now - 3_600_000}, NULL, 0, NULL, NULL FROM {forms['numbers']}"
    )
    history_columns = ", ".join(
        q(name)
        for name in (
            "queue",
            "key",
            "scheduledAt",
            "createdAt",
            "firstDeliveredAt",
            "lastDeliveredAt",
            "deliveries",
            "outcome",
            "finishedAt",
        )
    )
    # Ten rows a key (n modulo a tenth of the rows), a hundred rows finished in each ms.
    finished = f"({now} - (:rows - n) + ((:rows - n) % 100))"
    history = (
        f"INSERT INTO delivery_history ({history_columns}) "
        f"SELECT :queue, {forms['key'].format(n='n % :keys')}, "
        f"{finished} - 120000, {finished} - 180000, {finished} - 60000, {finished} - 1000, 1, "
        "CASE WHEN n % 200 = 0 THEN 'dead_lettered' WHEN n % 50 = 1 THEN 'dropped' "
        f"ELSE 'acknowledged' END, {finished} FROM {forms['numbers']}"
    )
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    groups = _key_groups(messages)
    try:
        with engine.connect() as connection:
            steps: list[tuple[str, str, int, dict[str, Any]]] = [
                (orders, QUEUE, messages, {"groups": groups}),
                (others, OTHER, messages // 5, {}),
                (history, QUEUE, messages, _history_parameters(groups, messages)),
                (history, OTHER, messages // 10, _history_parameters(groups, messages // 10)),
            ]
            for statement, queue, count, extra in steps:
                for low in range(1, count + 1, CHUNK):
                    high = min(count, low + CHUNK - 1)
                    connection.execute(
                        text(statement.replace("{low}", str(low)).replace("{high}", str(high))),
                        {"low": low, "high": high, "queue": queue, "payload": PAYLOAD, **extra},
                    )
            connection.execute(text("CREATE TABLE bench_lists (messages BIGINT, filled_at BIGINT)"))
            connection.execute(
                text("INSERT INTO bench_lists VALUES (:messages, :now)"),
                {"messages": messages, "now": now},
            )
            if backend == "postgresql":
                connection.execute(text("VACUUM ANALYZE delayed_queue"))
                connection.execute(text("VACUUM ANALYZE delivery_history"))
                connection.execute(text("CHECKPOINT"))
            else:
                connection.execute(text("ANALYZE TABLE delayed_queue, delivery_history"))
    finally:
        engine.dispose()
    return Filled(messages, now)


def _admin(url: str) -> Engine:
    target = make_url(url)
    maintenance = "postgres" if _backend(url) == "postgresql" else "mysql"
    return create_engine(target.set(database=maintenance), isolation_level="AUTOCOMMIT")


def _filled(url: str) -> Filled | None:
    """What the database holds, when a run filled it whole; None when it must be (re)built."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            row = connection.execute(text("SELECT messages, filled_at FROM bench_lists")).first()
    except DBAPIError:  # no such database, or no marker: it was never filled whole
        return None
    finally:
        engine.dispose()
    return None if row is None else Filled(row.messages, row.filled_at)


def _drop(url: str, *, create: bool = False) -> None:
    """Drop the database `url` names, and create it anew when asked."""
    admin = _admin(url)
    quoted = admin.dialect.identifier_preparer.quote_identifier(make_url(url).database)
    force = " WITH (FORCE)" if _backend(url) == "postgresql" else ""
    try:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE IF EXISTS {quoted}{force}"))
            if create:
                connection.execute(text(f"CREATE DATABASE {quoted}"))
    finally:
        admin.dispose()


def prepare(url: str, messages: int, *, refill: bool) -> Filled:
    """The database `url` names, filled with `messages` messages: kept from a run
    before when it holds as many, built anew otherwise."""
    if not refill and (filled := _filled(url)) is not None and filled.messages == messages:
        return filled
    _drop(url, create=True)
    upgrade_to_head(url)
    started = time.perf_counter()
    filled = _fill(url, messages)
    print(
        f"filled {make_url(url).database}: {messages:,} messages in {time.perf_counter() - started:.0f} s"
    )
    return filled


# --- the cases --------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One page, asked of the store (`messages` or `history` keyword arguments) and over
    HTTP (a path with its query)."""

    label: str
    history: bool
    arguments: dict[str, Any]
    path: str


@dataclass
class Target:
    """A queue to ask pages of: its database's store, and its server once started."""

    label: str
    url: str
    queue: str
    filled: Filled
    cases: list[Case] = field(default_factory=list)


def _path(queue: str, history: bool, **query: Any) -> str:
    what = "history" if history else "messages"
    pairs = {name: value for name, value in query.items() if value is not None}
    return f"/v1/queues/{queue}/{what}?" + urlencode({**pairs, "limit": PAGE})


def cases(engine: Engine, queue: str, filled: Filled, since: int) -> list[Case]:
    """The pages timed, for `queue` of a database filled as `filled` says; deep pages
    start at the middle of the full queue's order (of `filled.messages`)."""
    backend = engine.dialect.name
    q = lambda name: _q("mariadb" if backend in ("mysql", "mariadb") else backend, name)
    middle = filled.messages // 2
    groups = _key_groups(filled.messages)
    middle_key = f"c{middle % groups:03d}/{middle:07d}"
    with engine.connect() as connection:
        row = connection.execute(
            text(
                f"SELECT {q('scheduledAt')} AS at, id FROM delayed_queue "
                f"WHERE {q('pKind')} = :queue AND {q('pKey')} = :key"
            ),
            {"queue": QUEUE, "key": middle_key},
        ).one()
        due = DuePosition(row.at, row.id, since)
        row = connection.execute(
            text(
                f"SELECT {q('finishedAt')} AS at, id FROM delivery_history WHERE queue = :queue "
                f"ORDER BY {q('finishedAt')} DESC, id DESC LIMIT 1 OFFSET {middle}"
            ),
            {"queue": QUEUE},
        ).one()
        finished = HistoryPosition(row.at, row.id)
    # The middle key with the prefix: `c007/` then the 500th of its 1,000 numbers; and
    # the middle of every key.
    prefixed = KeyPosition(f"{PREFIX}{7 + groups * 500:07d}")
    halfway = KeyPosition(f"c{groups // 2:03d}/")

    def messages(label: str, cursor: Any = None, **arguments: Any) -> Case:
        state = arguments.get("state", ListState.ALL)
        return Case(
            label,
            False,
            {"after": cursor, **arguments},
            _path(
                queue,
                False,
                state=None if state is ListState.ALL else state.value,
                prefix=arguments.get("prefix"),
                cursor=None if cursor is None else encode_cursor(cursor),
            ),
        )

    def history(label: str, cursor: Any = None, **arguments: Any) -> Case:
        outcome = arguments.get("outcome")
        return Case(
            label,
            True,
            {"before": cursor, **arguments},
            _path(
                queue,
                True,
                key=arguments.get("key"),
                outcome=None if outcome is None else outcome.value,
                cursor=None if cursor is None else encode_cursor(cursor),
            ),
        )

    return [
        messages("by due time, first page"),
        messages("by due time, from the middle (cursor)", due),
        messages("ready, first page", state=ListState.READY),
        messages("scheduled, first page", state=ListState.SCHEDULED),
        messages(f"leased ({LEASED} of the queue), first page", state=ListState.LEASED),
        messages(f"prefix `{PREFIX}` (1,000 keys), first page", prefix=PREFIX),
        messages(f"prefix `{PREFIX}`, from its middle (cursor)", prefixed, prefix=PREFIX),
        messages(f"prefix `{NO_PREFIX}` (no key)", prefix=NO_PREFIX),
        messages(
            f"prefix `{WIDE_PREFIX}` (every key), from the middle (cursor)",
            halfway,
            prefix=WIDE_PREFIX,
        ),
        history("history, first page"),
        history("history, from the middle (cursor)", finished),
        history(f"history of key `{HISTORY_KEY}` (10 rows)", key=HISTORY_KEY),
        history("history, dead-lettered (1 row in 200)", outcome=Finish.DEAD_LETTERED),
    ]


def _now() -> int:
    return time.time_ns() // 1_000_000


def _ask(storage: Storage, queue: str, case: Case) -> int:
    """Ask the store for the page; how many rows came."""
    if case.history:
        return len(storage.lists.history(queue, limit=PAGE, **case.arguments).entries)
    page = storage.lists.messages(queue, limit=PAGE, now=_now(), **case.arguments)
    return len(page.messages)


def _in_turn(targets: list[Target], round_number: int) -> list[Target]:
    """The targets in this round's order: each goes first in turn. A request that follows
    another to the same process finds it running, its caches warm: a fixed order would
    favour whichever target comes second."""
    shift = round_number % len(targets)
    return targets[shift:] + targets[:shift]


def time_store(targets: list[Target], rounds: int) -> dict[tuple[str, str], list[float]]:
    """Seconds per page through the store, by (case, target), round by round."""
    stores = {
        target.label: create_blocking_storage(Settings(database_url=target.url, auto_migrate=False))
        for target in targets
    }
    figures: dict[tuple[str, str], list[float]] = {}
    try:
        for round_number in range(rounds + 1):
            for index in range(len(targets[0].cases)):
                for target in _in_turn(targets, round_number):
                    case = target.cases[index]
                    started = time.perf_counter()
                    _ask(stores[target.label], target.queue, case)
                    elapsed = time.perf_counter() - started
                    if round_number:
                        figures.setdefault((case.label, target.label), []).append(elapsed)
    finally:
        for store in stores.values():
            store.close()
    return figures


def time_http(targets: list[Target], rounds: int) -> dict[tuple[str, str], list[float]]:
    """Seconds per page over HTTP, by (case, target): one `hourglass serve` per target (the
    small and the empty queue share a database, not a process: one answering two requests
    in a row answered the second faster), one keep-alive connection each."""
    figures: dict[tuple[str, str], list[float]] = {}
    with ExitStack() as stack:
        servers = {
            target.label: stack.enter_context(running_server(target.url)) for target in targets
        }

        async def run() -> None:
            connections = {
                target.label: HttpConnection("127.0.0.1", servers[target.label].port)
                for target in targets
            }
            try:
                for round_number in range(rounds + 1):
                    for index in range(len(targets[0].cases)):
                        for target in _in_turn(targets, round_number):
                            case = target.cases[index]
                            started = time.perf_counter()
                            status, _ = await connections[target.label].request("GET", case.path)
                            elapsed = time.perf_counter() - started
                            assert status == 200, (status, case.path)
                            if round_number:
                                figures.setdefault((case.label, target.label), []).append(elapsed)
            finally:
                for connection in connections.values():
                    await connection.close()

        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(run())
    return figures


def rows_per_page(targets: list[Target]) -> dict[tuple[str, str], int]:
    """How many rows each page has, by (case, target): the same page, or not?"""
    counts = {}
    for target in targets:
        store = create_blocking_storage(Settings(database_url=target.url, auto_migrate=False))
        try:
            for case in target.cases:
                counts[case.label, target.label] = _ask(store, target.queue, case)
        finally:
            store.close()
    return counts


def table(
    title: str,
    targets: list[Target],
    figures: dict[tuple[str, str], list[float]],
    counts: dict[tuple[str, str], int],
) -> str:
    full, small, empty = (target.label for target in targets)
    lines = [
        f"| {title} | rows | {full} | {small} | {empty} | full / small | full / empty |",
        "|---|---|---|---|---|---|---|",
    ]
    for case in targets[0].cases:
        medians = [statistics.median(figures[case.label, target.label]) for target in targets]
        rows = " / ".join(str(counts[case.label, target.label]) for target in targets[:2])
        lines.append(
            f"| {case.label} | {rows} | "
            + " | ".join(f"{median * 1000:.2f} ms" for median in medians)
            + f" | {medians[0] / medians[1]:.2f} | {medians[0] / medians[2]:.2f} |"
        )
    return "\n".join(lines)


# --- EXPLAIN ------------------------------------------------------------------------


class _Explain(Executable, ClauseElement):
    """The plan of `query` as it runs (PostgreSQL's EXPLAIN (ANALYZE, BUFFERS), MariaDB's
    ANALYZE)."""

    inherit_cache = False

    def __init__(self, query: Select[Any]) -> None:
        self.query = query


@compiles(_Explain)
def _compile_explain(element: _Explain, compiler: Any, **options: Any) -> str:
    query = compiler.process(element.query, **options)
    if compiler.dialect.name == "postgresql":
        return f"EXPLAIN (ANALYZE, BUFFERS) {query}"
    return f"ANALYZE {query}"


def _plan(connection: Connection, query: Select[Any], parameters: dict[str, Any]) -> str:
    result = connection.execute(_Explain(query), parameters)
    if connection.dialect.name == "postgresql":
        # Trimmed: the planner's own buffers (catalog reads), not the page's.
        lines = [row[0] for row in result]
        return "\n".join(
            line
            for number, line in enumerate(lines)
            if line != "Planning:" and not (number and lines[number - 1] == "Planning:")
        )
    names = list(result.keys())
    keep = ["id", "select_type", "table", "type", "key", "key_len", "ref", "rows", "r_rows"]
    keep += ["filtered", "r_filtered", "Extra"]
    rows = [dict(zip(names, row, strict=True)) for row in result]
    return "\n".join(
        "  ".join(f"{name}={row[name]}" for name in keep if name in row and name != "id")
        for row in rows
    )


def explain(target: Target) -> str:
    """Each list statement's plan on `target`'s queue, as Markdown."""
    store = create_blocking_storage(Settings(database_url=target.url, auto_migrate=False))
    now = _now()
    by_label = {case.label: case for case in target.cases}
    due = by_label["by due time, from the middle (cursor)"].arguments["after"]
    prefixed = by_label[f"prefix `{PREFIX}`, from its middle (cursor)"].arguments["after"]
    finished = by_label["history, from the middle (cursor)"].arguments["before"]
    halfway = by_label[f"prefix `{WIDE_PREFIX}` (every key), from the middle (cursor)"]
    halfway = halfway.arguments["after"]
    lists = store.lists
    statements: list[tuple[str, tuple[Select[Any], dict[str, Any]]]] = [
        ("Due order, first page", lists.messages_query(QUEUE, limit=PAGE, now=now)),
        (
            "Due order after a cursor (with `since`), from the middle",
            lists.messages_query(QUEUE, after=due, limit=PAGE, now=now),
        ),
    ]
    for state in (ListState.READY, ListState.SCHEDULED, ListState.LEASED):
        statements.append(
            (
                f"`state={state.value}`, first page",
                lists.messages_query(QUEUE, state=state, limit=PAGE, now=now),
            )
        )
    statements += [
        (
            f"Prefix `{PREFIX}` (1,000 keys), first page",
            lists.messages_query(QUEUE, prefix=PREFIX, limit=PAGE, now=now),
        ),
        (
            f"Prefix `{PREFIX}` after a cursor",
            lists.messages_query(QUEUE, prefix=PREFIX, after=prefixed, limit=PAGE, now=now),
        ),
        (
            f"Prefix `{WIDE_PREFIX}` (every key) after a cursor in the middle",
            lists.messages_query(QUEUE, prefix=WIDE_PREFIX, after=halfway, limit=PAGE, now=now),
        ),
        (
            f"Prefix `{PREFIX}`, `state=leased`",
            lists.messages_query(QUEUE, prefix=PREFIX, state=ListState.LEASED, limit=PAGE, now=now),
        ),
        ("History, first page", lists.history_query(QUEUE, limit=PAGE)),
        (
            "History after a cursor, from the middle",
            lists.history_query(QUEUE, before=finished, limit=PAGE),
        ),
        ("History of one key", lists.history_query(QUEUE, key=HISTORY_KEY, limit=PAGE)),
        (
            "History of one outcome (`dead_lettered`, 1 row in 200)",
            lists.history_query(QUEUE, outcome=Finish.DEAD_LETTERED, limit=PAGE),
        ),
    ]
    sections = []
    try:
        with store.engine.connect() as connection:
            for title, (query, parameters) in statements:
                _plan(connection, query, parameters)  # once to warm the cache
                sections.append(f"{title}:\n\n```\n{_plan(connection, query, parameters)}\n```")
    finally:
        store.close()
    return "\n\n".join(sections)


# --- main -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database-url",
        default="postgresql://root@127.0.0.1:5432/hourglass_bench_lists",
        help="the full queue's database (kept between runs); the small one is <name>_small",
    )
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=200, help="requests a case and queue")
    parser.add_argument("--refill", action="store_true", help="build both databases anew")
    parser.add_argument("--explain", action="store_true", help="print the plans, time nothing")
    parser.add_argument("--no-http", action="store_true", help="time through the store only")
    parser.add_argument("--no-store", action="store_true", help="time over HTTP only")
    parser.add_argument("--quick", action="store_true", help="10,000 messages, 5 rounds")
    parser.add_argument("--drop", action="store_true", help="drop both databases at the end")
    args = parser.parse_args(argv)
    if args.quick:
        args.messages, args.rounds = SMALL_MESSAGES, 5
    url = normalize_database_url(args.database_url)
    base = make_url(url)
    small_url = base.set(database=f"{base.database}_small").render_as_string(hide_password=False)
    full = prepare(url, args.messages, refill=args.refill)
    small = prepare(small_url, SMALL_MESSAGES, refill=args.refill)
    since = _now()
    targets = [
        Target(f"full: {full.messages:,} messages", url, QUEUE, full),
        Target(f"small: {small.messages:,}", small_url, QUEUE, small),
        Target("empty queue", small_url, EMPTY, small),
    ]
    for target in targets:
        engine = create_engine(target.url)
        try:
            target.cases = cases(engine, target.queue, target.filled, since)
        finally:
            engine.dispose()
    try:
        if args.explain:
            print(explain(targets[0]))
            return
        counts = rows_per_page(targets)
        backend = _backend(url)
        tables = []
        if not args.no_store:
            figures = time_store(targets, args.rounds)
            tables.append(table(f"{backend}, through the store", targets, figures, counts))
        if not args.no_http:
            figures = time_http(targets, args.rounds)
            tables.append(table(f"{backend}, over HTTP", targets, figures, counts))
        print("\n\n".join(tables))
    finally:
        if args.drop:
            for dropped in (url, small_url):
                _drop(dropped)


if __name__ == "__main__":
    main()
