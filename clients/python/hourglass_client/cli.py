"""`hourglass-worker module:function --queue Q`: a worker from the command line."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from hourglass_client.client import DEFAULT_URL, AsyncClient, Client, __version__
from hourglass_client.errors import HourglassError
from hourglass_client.worker import AsyncWorker, Worker

DESCRIPTION = """\
Run HANDLER on every message of a Hourglass queue, --concurrency at a time.

A message whose handler returns is acknowledged; one whose handler raises is
released, due again as the queue's retry setting says (at once without one),
or after the delay of a hourglass_client.Retry(delay) it raised. Leases are
extended while handlers run, so a handler may take longer than --lease.
"""

EPILOG = """\
HANDLER is module:function, e.g. tasks:send_reminder; the current directory is
importable. It gets one argument, a hourglass_client.DeliveredMessage (.key,
.payload, .deliveries, ...). An `async def` handler runs on asyncio, a plain
one in a pool of threads.

SIGTERM or SIGINT (Ctrl-C): stop polling, let running handlers finish, release
messages held but not started, exit 0. A second signal releases the running
messages too (another worker takes them) and exits at once with status 1.

Exit status: 0 after a stop, 1 when the service refuses the worker (a bad token
or queue name) or a second signal cut it short, 2 for bad arguments or a
HANDLER that cannot be imported.

Environment: HOURGLASS_URL and HOURGLASS_TOKEN give --url and --token (prefer
the environment for the token: arguments show in process lists).

Example:
  HOURGLASS_URL=http://hourglass:8080 hourglass-worker tasks:send_reminder \\
      --queue reminders --concurrency 20
"""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hourglass-worker",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("handler", metavar="HANDLER", help="the function to run, module:function")
    parser.add_argument("--queue", "-q", required=True, help="the queue to work on")
    parser.add_argument(
        "--url",
        default=os.environ.get("HOURGLASS_URL") or DEFAULT_URL,
        help="the service's base URL (default: $HOURGLASS_URL, else %(default)s)",
    )
    parser.add_argument(
        "--token",
        default=os.environ.get("HOURGLASS_TOKEN") or None,
        help="bearer token (default: $HOURGLASS_TOKEN)",
    )
    parser.add_argument(
        "--concurrency",
        "-c",
        type=int,
        default=10,
        metavar="N",
        help="messages handled at once, 1-1000 (default: %(default)s)",
    )
    parser.add_argument(
        "--batch",
        type=int,
        metavar="N",
        help="most messages one poll asks for, 1 to --concurrency (default: half of it)",
    )
    parser.add_argument(
        "--lease",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="lease per poll, extended while handlers run, 1-43200 (default: %(default)g)",
    )
    parser.add_argument(
        "--wait",
        type=float,
        default=20.0,
        metavar="SECONDS",
        help="how long a poll waits for a message to come due, 0-20 (default: %(default)g)",
    )
    parser.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="info logs a line per message; debug adds tracebacks (default: %(default)s)",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    return parser


def load_handler(spec: str) -> Callable[..., Any]:
    """The function named by `module:function` (`module:object.method` too)."""
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name or not attribute:
        raise ValueError(f"{spec!r} is not module:function")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    target: Any = importlib.import_module(module_name)
    for part in attribute.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise TypeError(f"{spec!r} is not callable")
    return target


def main(arguments: Sequence[str] | None = None) -> int:
    parser = _parser()
    options = parser.parse_args(arguments)
    logging.basicConfig(
        level=options.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if options.log_level != "debug":
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request, else
    log = logging.getLogger("hourglass-worker")
    try:
        handler = load_handler(options.handler)
    except Exception as error:  # noqa: BLE001 - any import failure is the argument's
        parser.error(f"cannot load {options.handler!r}: {type(error).__name__}: {error}")
    settings = {
        "concurrency": options.concurrency,
        "batch": options.batch,
        "lease": options.lease,
        "wait": options.wait,
        "logger": log,
    }
    try:
        if inspect.iscoroutinefunction(handler):
            return asyncio.run(_work_async(options, handler, settings))
        return _work(options, handler, settings)
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    except HourglassError:
        return 1  # the worker logged why


def _work(
    options: argparse.Namespace, handler: Callable[..., Any], settings: dict[str, Any]
) -> int:
    worker = Worker(Client(options.url, token=options.token), options.queue, handler, **settings)
    worker.run()
    if worker.abandoned:
        # Handlers may still run in their threads (their messages are released):
        # exit without waiting for them.
        logging.shutdown()
        os._exit(1)
    return 0


async def _work_async(
    options: argparse.Namespace, handler: Callable[..., Any], settings: dict[str, Any]
) -> int:
    async with AsyncClient(options.url, token=options.token) as client:
        worker = AsyncWorker(client, options.queue, handler, **settings)
        await worker.run()
        return 1 if worker.abandoned else 0


if __name__ == "__main__":
    sys.exit(main())
