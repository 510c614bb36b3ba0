"""What the connection guard (app/server.py) costs per request: CPU per request through
uvicorn's own httptools protocol and through the guarded one, in this process.

Both serve the same app (on a scratch SQLite file, its lifespan started) over an
in-memory transport, so neither sockets nor a client's CPU blur the difference:
half the requests are `GET /healthz`, half a `POST …/poll` whose body the app reads
and answers 422. Rounds alternate between the two, so whatever else runs on the
machine falls on both alike.

    python -m bench.overhead --rounds 30
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from pathlib import Path

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from app.config import Settings
from app.main import create_app
from app.server import ConnectionGuard, ConnectionLimits, GuardedHttpProtocol
from app.storage.schema import upgrade_to_head

REQUESTS = (
    b"GET /healthz HTTP/1.1\r\nHost: bench\r\n\r\n",
    (
        b"POST /v1/queues/q/poll HTTP/1.1\r\nHost: bench\r\n"
        b"Content-Type: application/json\r\nContent-Length: 10\r\n\r\n"
        b'{"max": 0}'
    ),
)


class _Transport(asyncio.Transport):
    """Takes what the protocol writes; `answered` is set when an answer's body is out."""

    def __init__(self) -> None:
        super().__init__()
        self.answered = asyncio.Event()

    def get_extra_info(self, name: str, default: object = None) -> object:
        return {"peername": ("127.0.0.1", 40000), "sockname": ("127.0.0.1", 8080)}.get(
            name, default
        )

    def write(self, data: bytes) -> None:
        if data.endswith(b"}"):  # every answer here is JSON
            self.answered.set()

    def is_closing(self) -> bool:
        return False

    def close(self) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


async def _microseconds_per_request(protocol: asyncio.Protocol, requests: int) -> float:
    transport = _Transport()
    protocol.connection_made(transport)
    started = time.process_time()
    for number in range(requests):
        transport.answered.clear()
        protocol.data_received(REQUESTS[number % 2])
        await transport.answered.wait()
        await asyncio.sleep(0)  # let the request's task finish
    used = time.process_time() - started
    protocol.connection_lost(None)
    return 1e6 * used / requests


async def compare(database_url: str, rounds: int, requests: int) -> dict[str, list[float]]:
    app = create_app(Settings(database_url=database_url, auto_migrate=False))
    config = uvicorn.Config(app, lifespan="off")
    config.load()
    state = ServerState()
    guard = ConnectionGuard(ConnectionLimits.from_settings(app.state.settings), events=None)
    makers = {
        "uvicorn": lambda: HttpToolsProtocol(config=config, server_state=state, app_state={}),
        "guarded": lambda: GuardedHttpProtocol(
            config=config, server_state=state, app_state={}, guard=guard
        ),
    }
    results: dict[str, list[float]] = {name: [] for name in makers}
    async with app.router.lifespan_context(app):
        for make in makers.values():  # warm up
            await _microseconds_per_request(make(), requests // 2)
        for round_ in range(rounds):
            order = list(makers) if round_ % 2 else list(reversed(makers))
            for name in order:
                results[name].append(await _microseconds_per_request(makers[name](), requests))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--requests", type=int, default=1000, help="per round and protocol")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # the 422s are not news
    with tempfile.TemporaryDirectory() as scratch:
        database_url = f"sqlite:///{Path(scratch) / 'overhead.db'}"
        upgrade_to_head(database_url)
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            runner = asyncio.run
        results = runner(compare(database_url, args.rounds, args.requests))
    for name, values in results.items():
        quartiles = statistics.quantiles(values, n=4)
        print(
            f"{name}: {statistics.median(values):.1f} µs of CPU per request "
            f"(median of {len(values)} rounds; quartiles {quartiles[0]:.1f}–{quartiles[2]:.1f})"
        )


if __name__ == "__main__":
    main()
