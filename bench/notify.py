"""LISTEN/NOTIFY between replicas (docs/decisions/0019-listen-notify.md), through real
`hourglass serve` processes on PostgreSQL:

    python -m bench.notify                      # ~9 minutes
    python -m bench.notify --quick              # does it run?

1. Wake-up: two replicas A and B on one database (re-check every 1 s, the default), with
   the listener off (HOURGLASS_LISTEN=off: re-checks only, as before) and on. --pairs
   workers each long-poll their own queue on B (wait 20 s); for each, an offerer waits a
   random 50–250 ms after the poll went out (so it is waiting) and offers through A one
   message due now, or due in 2 s. The figure: when the poll's answer arrived minus the
   message's due time (its `scheduled_at`), p50/p99 over --rounds per pair and kind.
   With the listener on, due-now offers through B itself too: the floor (a local
   wake-up), in the same run, that the machine's load sets.
2. Notice: offers one at a time through one replica, and the time from each answer
   to its notification reaching a client LISTENing on the channel (the NOTIFY's own
   share of a wake-up, without the polled replica's look and answer).
3. Cost: single offers at 32 clients through A (messages due now: each one tells peers),
   B running and listening, with notifications on and off (two pairs of replicas, all
   four started at once), alternating, --repeats runs of --seconds each; the medians of
   the rate and of the CPU per offer (from /proc) of A, of B (the listener's reading),
   and of the database's backends (the sender's NOTIFY and the listener's): CPU per
   offer depends less on what else the machine runs than the rate does.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import random
import statistics
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import datetime
from typing import Any

import psycopg

from bench.accounting import process_cpu
from bench.hourglass import fresh_database
from bench.http_client import Connection, event_loop_factory
from tests.support.server import Server, running_server

DEFAULT_DSN = "postgresql://root@127.0.0.1:5432/hourglass_bench_notify"
WAIT_SECONDS = 20
OFFER_CLIENTS = 32


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


@contextmanager
def _replicas(dsn: str, listen: bool, count: int = 2) -> Iterator[list[Server]]:
    with ExitStack() as stack:
        yield [
            stack.enter_context(running_server(dsn, HOURGLASS_LISTEN="on" if listen else "off"))
            for _ in range(count)
        ]


async def _wake_ups(
    first: Server, second: Server, queue: str, delay: float, rounds: int
) -> list[tuple[float, float]]:
    """Seconds from due to delivery on `second` of messages offered through `first`, each
    with the part of it before the offer's answer reached the offerer."""
    poller, offerer = Connection("127.0.0.1", second.port), Connection("127.0.0.1", first.port)
    late: list[tuple[float, float]] = []
    try:
        for number in range(rounds):
            polled = asyncio.ensure_future(
                poller.json("POST", f"/v1/queues/{queue}/poll", {"max": 1, "wait": WAIT_SECONDS})
            )
            # The poll's own end: its answer may come before the offer's is read.
            ended: list[float] = []
            polled.add_done_callback(lambda _, ended=ended: ended.append(time.time()))
            await asyncio.sleep(random.uniform(0.05, 0.25))
            body: dict[str, Any] = {"payload": number}
            if delay:
                body["delay"] = delay
            offered = await offerer.json(
                "PUT", f"/v1/queues/{queue}/messages/m{number}", body, expect=(201,)
            )
            answered = time.time()
            answer = await polled
            arrived = ended[0]
            assert [m["key"] for m in answer["messages"]] == [f"m{number}"], answer
            due = _epoch(offered["scheduled_at"])
            late.append((arrived - due, answered - due))
            await poller.json(
                "DELETE", f"/v1/queues/{queue}/locks/{answer['lock_id']}", expect=(204,)
            )
    finally:
        await poller.close()
        await offerer.close()
    return late


def _split(samples: list[tuple[float, float]]) -> dict[str, float]:
    """Where a due-now wake-up's time goes: until the offer's answer reached the offerer
    (the offer on its replica: its statement, its commit, its answer), and from there to
    the poll's answer (the NOTIFY, the other replica's look and answer); for the whole and
    for the slowest 2% of wake-ups, the tail the p99 reports."""
    offer = [before for _, before in samples]
    rest = [whole - before for whole, before in samples]
    slowest = sorted(samples, reverse=True)[: max(1, len(samples) // 50)]
    return {
        "offer_p50_ms": _percentile(offer, 0.5) * 1000,
        "offer_p99_ms": _percentile(offer, 0.99) * 1000,
        "after_offer_p50_ms": _percentile(rest, 0.5) * 1000,
        "after_offer_p99_ms": _percentile(rest, 0.99) * 1000,
        "slowest_offer_ms": statistics.mean(before for _, before in slowest) * 1000,
        "slowest_after_offer_ms": statistics.mean(whole - before for whole, before in slowest)
        * 1000,
    }


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


def _backend_pids(dsn: str) -> list[int]:
    with psycopg.connect(dsn, autocommit=True) as connection:
        return [
            row[0]
            for row in connection.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                "AND pid <> pg_backend_pid()"
            )
        ]


def _cpu(dsn: str, servers: list[Server]) -> dict[str, Any]:
    """CPU seconds so far of each server and of each of the database's backends, by pid."""
    return {
        "servers": [process_cpu(server.pid) for server in servers],
        "backends": {pid: process_cpu(pid) for pid in _backend_pids(dsn)},
    }


async def _offers(
    dsn: str, server: Server, others: list[Server], seconds: float, prefix: str
) -> dict[str, float]:
    """Single offers through `server`, OFFER_CLIENTS at once, due now: a second, and the CPU
    per offer (µs) of `server`, of `others`, and of the database's backends (a backend
    that started meanwhile counted from zero)."""
    clients = [Connection("127.0.0.1", server.port) for _ in range(OFFER_CLIENTS)]
    counter = itertools.count()
    done = 0

    async def offer(client: Connection, until: float) -> None:
        nonlocal done
        while time.perf_counter() < until:
            key = f"{prefix}-{next(counter)}"
            await client.json("PUT", f"/v1/queues/bench/messages/{key}", b'{"payload":1}', (201,))
            done += 1

    try:
        warm = time.perf_counter() + seconds / 4
        await asyncio.gather(*(offer(client, warm) for client in clients))
        done = 0
        before = _cpu(dsn, [server, *others])
        started = time.perf_counter()
        until = started + seconds
        await asyncio.gather(*(offer(client, until) for client in clients))
        elapsed = time.perf_counter() - started
        after = _cpu(dsn, [server, *others])
    finally:
        for client in clients:
            await client.close()
    used = [b - a for a, b in zip(before["servers"], after["servers"], strict=True)]
    backends = sum(cpu - before["backends"].get(pid, 0.0) for pid, cpu in after["backends"].items())
    per_offer = 1e6 / done
    return {
        "rate": done / elapsed,
        "server_us": used[0] * per_offer,
        "others_us": sum(used[1:]) * per_offer,
        "postgres_us": backends * per_offer,
        "total_us": (sum(used) + backends) * per_offer,
    }


def _clear(dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as connection:
        connection.execute("TRUNCATE delayed_queue, delivery_history")
        connection.execute("VACUUM ANALYZE delayed_queue")


def wake_up(dsn: str, pairs: int, rounds: int, rounds_later: int) -> dict[str, dict[str, float]]:
    figures: dict[str, dict[str, float]] = {}
    for listen in (False, True):
        fresh_database(dsn)
        with (
            _replicas(dsn, listen) as (first, second),
            asyncio.Runner(loop_factory=event_loop_factory()) as loop,
        ):
            kinds = [(first, 0.0, rounds), (first, 2.0, rounds_later)]
            if listen:  # the floor: offered through the polled replica itself
                kinds.append((second, 0.0, rounds))
            for through, delay, count in kinds:

                async def all_pairs(
                    through: Server = through, delay: float = delay, count: int = count
                ) -> list[tuple[float, float]]:
                    lists = await asyncio.gather(
                        *(
                            _wake_ups(through, second, f"q{pair}-{delay:g}", delay, count)
                            for pair in range(pairs)
                        )
                    )
                    return [value for values in lists for value in values]

                samples = loop.run(all_pairs())
                late = [whole for whole, _ in samples]
                name = (
                    f"listen {'on' if listen else 'off'}, due {'now' if not delay else 'in 2 s'}"
                    + (", offered through B itself" if through is second else "")
                )
                figures[name] = {
                    "samples": len(late),
                    "p50_ms": _percentile(late, 0.5) * 1000,
                    "p99_ms": _percentile(late, 0.99) * 1000,
                    "max_ms": max(late) * 1000,
                    **(_split(samples) if not delay else {}),
                }
                print(name, {k: round(v, 1) for k, v in figures[name].items()}, flush=True)
    return figures


async def _told_after_answer(dsn: str, server: Server, offers: int) -> list[float]:
    """Seconds from an offer's answer to its notification reaching a LISTENing client."""
    listening = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    await listening.execute("LISTEN hourglass")
    notifications = listening.notifies()
    http = Connection("127.0.0.1", server.port)
    after: list[float] = []
    try:
        for number in range(offers):
            await http.json("PUT", f"/v1/queues/told/messages/k{number}", {"payload": 1}, (201,))
            answered = time.perf_counter()
            await notifications.__anext__()
            after.append(time.perf_counter() - answered)
            await asyncio.sleep(0.02)
    finally:
        await http.close()
        await notifications.aclose()
        await listening.close()
    return after


def notice(dsn: str, offers: int) -> dict[str, float]:
    fresh_database(dsn)
    with running_server(dsn) as server:
        # asyncio's own loop: psycopg's notifies() waited forever under uvloop here.
        after = asyncio.run(_told_after_answer(dsn, server, offers))
    return {
        "samples": len(after),
        "p50_ms": _percentile(after, 0.5) * 1000,
        "p99_ms": _percentile(after, 0.99) * 1000,
    }


def cost(dsn: str, seconds: float, repeats: int) -> dict[str, dict[str, float]]:
    fresh_database(dsn)
    runs: dict[str, list[dict[str, float]]] = {"on": [], "off": []}
    with (
        _replicas(dsn, True) as (on, listening),
        _replicas(dsn, False) as (off, idle),
        asyncio.Runner(loop_factory=event_loop_factory()) as loop,
    ):
        for number in range(repeats):
            order = ("on", "off") if number % 2 == 0 else ("off", "on")
            for mode in order:
                _clear(dsn)
                server, other = (on, listening) if mode == "on" else (off, idle)
                runs[mode].append(
                    loop.run(_offers(dsn, server, [other], seconds, f"{mode}-{number}"))
                )
            print(
                f"run {number}: "
                + "; ".join(
                    f"{mode} " + ", ".join(f"{k} {v:,.0f}" for k, v in values[-1].items())
                    for mode, values in runs.items()
                ),
                flush=True,
            )
    medians: dict[str, dict[str, float]] = {
        mode: {key: statistics.median(run[key] for run in values) for key in values[0]}
        for mode, values in runs.items()
    }
    medians["on/off"] = {
        key: medians["on"][key] / medians["off"][key]
        for key in medians["on"]
        if medians["off"][key]
    }
    return medians


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default=DEFAULT_DSN)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument(
        "--rounds",
        type=int,
        default=250,
        help="due-now offers per pair (250: with 4 pairs the p99 is the tenth slowest of 1,000)",
    )
    parser.add_argument("--rounds-later", type=int, default=25, help="due-in-2-s offers per pair")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--skip-wake-up", action="store_true")
    parser.add_argument("--skip-cost", action="store_true")
    arguments = parser.parse_args()
    if arguments.quick:
        arguments.pairs, arguments.rounds, arguments.rounds_later = 2, 5, 2
        arguments.seconds, arguments.repeats = 2.0, 1
    if not arguments.skip_wake_up:
        wake_up(arguments.dsn, arguments.pairs, arguments.rounds, arguments.rounds_later)
    print("notification after the offer's answer:", notice(arguments.dsn, arguments.rounds * 4))
    if not arguments.skip_cost:
        print(
            "single offers, 32 clients:", cost(arguments.dsn, arguments.seconds, arguments.repeats)
        )


if __name__ == "__main__":
    main()
