"""Python calls per request through an ASGI app in process: a count the machine's load
does not move, for Hourglass's empty poll and new-key offer beside the floor's.

    python -m bench.calls --database-url postgresql://root@127.0.0.1:5432/hourglass_probe
    python -m bench.calls --top 30 --request hourglass-poll --beyond-floor  # what to cut

Each app (Hourglass's `create_app(Settings(database_url=…))`, and bench/floor.py's on
--floor-dsn) is started through its ASGI lifespan on uvloop, the server's loop, and
sent requests one at a time: a warm-up first, then --requests of each kind under
cProfile. Only the app's own call, `await app(scope, receive, send)`, is profiled: its
middleware, routing, body validation, the service, storage and the driver, and the
built-in functions and C methods they call; a coroutine resumed after it waited on the
database counts again, as cProfile counts every resumption as a call; and whatever
the loop runs meanwhile (on uvloop the loop itself is C; the pool's or the app's
background tasks, should they wake). Not counted: the client, the making of the scope,
a server's HTTP parsing and writing (uvicorn's; here `receive` and `send` are this
module's stand-ins, which call nothing, and their own frames are left out, as is this
module's frame around the app's call), the warm-up, and anything run in another
thread: cProfile sees only the event loop's, so on SQLite and MariaDB, whose
statements Hourglass runs in worker threads, its storage is left out of the count
(compare on PostgreSQL, where it runs on the loop). The total of pstats' calls (`nc`,
recursive calls included) over the profiled requests, divided by their number.
`--top` names them by call site (the function called and its caller); a coroutine
resumed by the loop, or a frame re-entered after SQLAlchemy's greenlet switched back
to it, has no caller there.

On asyncio's own loop its Python frames add ~120 calls per request to every figure:
run these on uvloop (installed with the bench extra). The offers' messages are due in
an hour, in queue `q`, under keys of this run's own; they are deleted afterwards (the
service's through its API, the floor's by their keys).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg

from app.config import Settings
from app.main import create_app
from bench import floor
from bench.http_client import event_loop_factory
from bench.probe import bare_app
from bench.targets import PAYLOAD

DEFAULT_DATABASE_URL = floor.DEFAULT_DSN
QUEUE = "q"
POLL = b'{"max":1}'
OFFER = b'{"payload":' + PAYLOAD + b',"delay":3600}'
# The targets for calls per request, and the counts recorded when they were set
# (2026-11-27, Hourglass at b198894, against a floor that was not this module's);
# bench/RESULTS.md has this module's counts since.
TARGETS = {"hourglass-poll": 650, "hourglass-offer": 750}
RECORDED = {
    "bare": 7,
    "floor-poll": 525,
    "floor-offer": 611,
    "hourglass-poll": 867,
    "hourglass-offer": 1102,
}
ROWS = {
    "bare": "bare ASGI app (fixed 200)",
    "floor-poll": "floor: empty poll",
    "hourglass-poll": "Hourglass: empty poll",
    "floor-offer": "floor: new-key offer",
    "hourglass-offer": "Hourglass: new-key offer",
}
# The bound on Hourglass's CPU per request against the floor's (bench/probe.py compare).
FLOOR_RATIO = 1.2
# Which of the floor's rows each of Hourglass's is compared with.
FLOOR_OF = {"hourglass-poll": "floor-poll", "hourglass-offer": "floor-offer"}

Function = tuple[str, int, str]  # pstats' key: file, line, name


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: bytes
    status: int


class _Exchange:
    """The stand-ins for a server's `receive` and `send`, for one request: they call
    nothing (so that they add no calls but their own, which are left out)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.read = False
        self.status = 0
        self.answer = b""
        self.finished = False

    async def receive(self) -> dict[str, Any]:
        if not self.read:
            self.read = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        while not self.finished:  # as a server: a disconnect only once the answer is out
            await asyncio.sleep(0.001)
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        elif message["type"] == "http.response.body":
            if "body" in message:
                self.answer += message["body"]
            # Not message.get(): a call, which would be counted as the app's.
            if not ("more_body" in message and message["more_body"]):  # noqa: RUF019
                self.finished = True


def _scope(request: Request, state: dict[str, Any]) -> dict[str, Any]:
    """What uvicorn hands the app for `request` on a keep-alive connection."""
    path, _, query = request.path.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "server": ("127.0.0.1", 8181),
        "client": ("127.0.0.1", 50000),
        "scheme": "http",
        "method": request.method,
        "root_path": "",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "headers": [
            (b"host", b"127.0.0.1:8181"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(request.body)).encode()),
        ],
        "state": state.copy(),
    }


async def _call(
    app: Any, request: Request, state: dict[str, Any], profiler: cProfile.Profile | None
) -> None:
    """One request through `app`, under `profiler` when given; SystemExit on a status
    other than the request's."""
    scope = _scope(request, state)
    exchange = _Exchange(request.body)
    if profiler is None:
        await app(scope, exchange.receive, exchange.send)
    else:
        profiler.enable()
        try:
            await app(scope, exchange.receive, exchange.send)
        finally:
            profiler.disable()
    if exchange.status != request.status:
        raise SystemExit(
            f"{request.method} {request.path}: {exchange.status} {exchange.answer[:300]!r}"
        )


@asynccontextmanager
async def running(app: Any) -> AsyncIterator[dict[str, Any]]:
    """`app` started through its ASGI lifespan, and stopped after; its lifespan state."""
    inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    state: dict[str, Any] = {}
    scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}, "state": state}
    task = asyncio.create_task(app(scope, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    answer = await outbox.get()
    if answer["type"] != "lifespan.startup.complete":
        await asyncio.gather(task, return_exceptions=True)
        raise SystemExit(f"the app did not start: {answer.get('message', answer)}")
    try:
        yield state
    finally:
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await task


# A call site: the function called, and its caller (None: resumed by the event loop, or
# called from a frame left out).
Site = tuple[Function, Function | None]


@dataclass
class Counted:
    """What the profiled requests of one kind called, by call site."""

    requests: int
    sites: dict[Site, int]

    @property
    def per_request(self) -> float:
        return sum(self.sites.values()) / self.requests

    def by_function(self) -> dict[Function, float]:
        calls: dict[Function, float] = defaultdict(float)
        for (function, _caller), number in self.sites.items():
            calls[function] += number / self.requests
        return calls


def _server_calls(profiler: cProfile.Profile) -> dict[Site, int]:
    """Calls by call site, this module's own frames and the profiler's switch left out."""
    stats = pstats.Stats(profiler)
    here = str(Path(__file__).resolve())
    entries: dict[Function, tuple[Any, ...]] = stats.stats  # type: ignore[attr-defined]
    sites: dict[Site, int] = {}
    for function, (_primitive, calls, _own, _cumulative, callers) in entries.items():
        if str(Path(function[0]).resolve()) == here or "_lsprof.Profiler" in function[2]:
            continue
        # nc: every call, recursive ones included; by caller, the rest from no caller.
        from_callers = 0
        for caller, (_caller_primitive, caller_calls, *_times) in callers.items():
            sites[function, caller] = caller_calls
            from_callers += caller_calls
        if calls > from_callers:
            sites[function, None] = calls - from_callers
    return sites


async def count(
    app: Any, state: dict[str, Any], request: Callable[[int], Request], requests: int, warmup: int
) -> Counted:
    """Calls per request of `request(number)` through `app`, after `warmup` of them."""
    for number in range(warmup):
        await _call(app, request(number), state, None)
    profiler = cProfile.Profile()
    for number in range(warmup, warmup + requests):
        await _call(app, request(number), state, profiler)
    return Counted(requests, _server_calls(profiler))


def _offer(prefix: str) -> Callable[[int], Request]:
    return lambda number: Request(
        "PUT", f"/v1/queues/{QUEUE}/messages/{quote(f'{prefix}-{number}')}", OFFER, 201
    )


def _poll(number: int) -> Request:
    return Request("POST", "/v1/queues/empty/poll", POLL, 200)


async def measure(
    database_url: str, floor_dsn: str, requests: int, warmup: int
) -> dict[str, Counted]:
    """Every row of the table: the bare app, then Hourglass's requests, then the floor's."""
    run = uuid.uuid4().hex[:8]
    counted: dict[str, Counted] = {}
    async with running(bare_app) as state:
        counted["bare"] = await count(
            bare_app, state, lambda number: Request("GET", "/", b"", 200), requests, warmup
        )
    hourglass = create_app(Settings(database_url=database_url))
    async with running(hourglass) as state:
        counted["hourglass-poll"] = await count(hourglass, state, _poll, requests, warmup)
        offer = _offer(f"calls-{run}-hourglass")
        counted["hourglass-offer"] = await count(hourglass, state, offer, requests, warmup)
        for number in range(warmup + requests):  # through the API: as it keeps working
            made = offer(number)
            await _call(hourglass, Request("DELETE", made.path, b"", 204), state, None)
    floor_app = floor.create_app(floor_dsn, pool_size=2)
    async with running(floor_app) as state:
        counted["floor-poll"] = await count(floor_app, state, _poll, requests, warmup)
        prefix = f"calls-{run}-floor"
        counted["floor-offer"] = await count(floor_app, state, _offer(prefix), requests, warmup)
    async with await psycopg.AsyncConnection.connect(floor_dsn, autocommit=True) as connection:
        await connection.execute(
            'DELETE FROM delayed_queue WHERE "pKind" = %s AND "pKey" LIKE %s',
            (QUEUE, prefix + "-%"),
        )
    return counted


def table(counted: dict[str, Counted]) -> list[str]:
    """The table of calls per request, with the targets and the floor's ratios."""
    lines = [f"  {'':28} {'calls/request':>13} {'x floor':>8}  {'target':>7}  {'recorded':>8}"]
    for name, label in ROWS.items():
        per_request = counted[name].per_request
        floor_row = FLOOR_OF.get(name)
        ratio = f"{per_request / counted[floor_row].per_request:7.2f}x" if floor_row else ""
        target = f"<= {TARGETS[name]}" if name in TARGETS else ""
        recorded = f"{RECORDED[name]:,}" if name in RECORDED else ""
        lines.append(f"  {label:28} {per_request:13.0f} {ratio:>8}  {target:>7}  {recorded:>8}")
    within = ", ".join(
        f"{ROWS[name].split(': ')[1]} <= {FLOOR_RATIO * counted[floor_row].per_request:.0f}"
        for name, floor_row in FLOOR_OF.items()
    )
    lines.append(f"  at {FLOOR_RATIO:.2f}x this floor, Hourglass's {within}")
    return lines


def _module_of(filename: str) -> str:
    """A dotted module name for a profiled file: from site-packages, or the repository."""
    if filename == "~":
        return "(built-in)"
    path = Path(filename)
    parts = path.with_suffix("").parts
    for anchor in ("site-packages", "dist-packages"):
        if anchor in parts:
            return ".".join(parts[parts.index(anchor) + 1 :])
    root = Path(__file__).resolve().parents[1]
    if path.is_relative_to(root):
        return ".".join(path.relative_to(root).with_suffix("").parts)
    if "lib" in parts:  # the standard library: python3.11/asyncio/… -> asyncio.…
        return ".".join(parts[parts.index("lib") + 2 :])
    return filename


def _label(function: Function | None) -> str:
    if function is None:
        return "(the event loop)"
    filename, line, name = function
    if filename == "~":
        return name
    return f"{_module_of(filename)}:{name} ({line})"


def top(
    counted: Counted, number: int, beside: Counted | None = None, *, beyond: bool = False
) -> list[str]:
    """The `number` call sites (function <- its caller) with most calls per request, and
    the calls by package; with `beside`, the same site's calls per request there, and
    with `beyond`, the sites ranked by how many more calls they make than there."""

    def there(site: Site) -> float:
        return 0.0 if beside is None else beside.sites.get(site, 0) / beside.requests

    def rank(item: tuple[Site, int]) -> float:
        site, calls = item
        return calls / counted.requests - (there(site) if beyond else 0.0)

    ranked = sorted(counted.sites.items(), key=rank, reverse=True)[:number]
    heading = f"  {'calls/request':>13}" + (f" {'floor':>6}" if beside else "")
    lines = [heading + "  function <- its caller"]
    for site, calls in ranked:
        other = f" {there(site):6.1f}" if beside is not None else ""
        called, caller = site
        lines.append(
            f"  {calls / counted.requests:13.1f}{other}  {_label(called)} <- {_label(caller)}"
        )
    lines.append("  by package (of the function called):")
    packages = _by_package(counted)
    packages_beside = _by_package(beside) if beside is not None else {}
    for package, package_calls in sorted(packages.items(), key=lambda item: -item[1]):
        other = f" {packages_beside.get(package, 0):6.0f}" if beside is not None else ""
        lines.append(f"  {package_calls:13.0f}{other}  {package}")
    return lines


def app_modules(counted: Counted) -> list[str]:
    """The modules of the app (app/…) whose functions the requests called: the files a
    request passes through, in path order."""
    root = Path(__file__).resolve().parent.parent
    found = set()
    for function, _caller in counted.sites:
        path = Path(function[0])
        if path.is_absolute() and path.resolve().is_relative_to(root / "app"):
            found.add(str(path.resolve().relative_to(root)))
    return sorted(found)


def _by_package(counted: Counted) -> dict[str, float]:
    packages: dict[str, float] = defaultdict(float)
    for function, calls in counted.by_function().items():
        packages[_module_of(function[0]).split(".")[0]] += calls
    return packages


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database-url",
        default=DEFAULT_DATABASE_URL,
        help="Hourglass's database, migrated (`hourglass migrate`); SQLite works too",
    )
    parser.add_argument(
        "--floor-dsn",
        help="the floor's PostgreSQL database (default: --database-url if it is PostgreSQL, "
        f"else {floor.DEFAULT_DSN})",
    )
    parser.add_argument("--requests", type=int, default=500, help="profiled, of each kind")
    parser.add_argument("--warmup", type=int, default=50, help="requests of each kind first")
    parser.add_argument("--top", type=int, default=0, help="the N call sites with most calls")
    parser.add_argument("--request", choices=list(ROWS), default="hourglass-poll", help="for --top")
    parser.add_argument(
        "--modules",
        action="store_true",
        help="also list the app's modules each Hourglass request passed through",
    )
    parser.add_argument(
        "--beyond-floor",
        action="store_true",
        help="for --top of a Hourglass request: rank call sites by their calls beyond the floor's",
    )
    args = parser.parse_args()
    floor_dsn = args.floor_dsn or (
        args.database_url.replace("postgresql+psycopg://", "postgresql://", 1)
        if args.database_url.startswith(("postgresql", "postgres:"))
        else floor.DEFAULT_DSN
    )
    loop_factory = event_loop_factory()
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        counted = runner.run(measure(args.database_url, floor_dsn, args.requests, args.warmup))
    loop = "uvloop" if loop_factory else "asyncio's loop (uvloop is not installed: +~120 calls)"
    print(
        f"Python calls per request, in process on {loop}, one at a time, "
        f"{args.requests} after {args.warmup} of warm-up (cProfile):"
    )
    print("\n".join(table(counted)))
    if not args.database_url.startswith(("postgresql", "postgres:")):
        print("  (not PostgreSQL: Hourglass's statements ran in threads, and are not counted)")
    if args.modules:
        for name in ("hourglass-poll", "hourglass-offer"):
            passed = app_modules(counted[name])
            print(f"\n{ROWS[name]}: {len(passed)} modules of app/")
            print("\n".join(f"  {module}" for module in passed))
    if args.top:
        beside = counted.get(FLOOR_OF.get(args.request, ""))
        ranking = "beyond the floor's" if args.beyond_floor and beside else "per request"
        print(f"\n{ROWS[args.request]}: the {args.top} call sites with most calls {ranking}")
        print("\n".join(top(counted[args.request], args.top, beside, beyond=args.beyond_floor)))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
