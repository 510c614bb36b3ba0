"""Handlers for the worker processes of test_worker_process.py (imported by
`hourglass-worker signal_handlers:…` from this folder, in a venv holding only the client).

Each reports its message's key to the test over the UNIX socket HANDLER_SOCKET and
does what the test answers: `ok` (return, after writing the key to DONE_FILE),
`retry` (raise Retry(3600)) or anything else (raise).
"""

from __future__ import annotations

import asyncio
import os
import socket

from hourglass_client import DeliveredMessage, Retry


def _obey(key: str, order: str) -> None:
    if order == "ok":
        with open(os.environ["DONE_FILE"], "a", encoding="utf-8") as done:
            done.write(key + "\n")
    elif order == "retry":
        raise Retry(3600, "told to retry")
    else:
        raise RuntimeError(f"told to fail ({order!r})")


def handler(message: DeliveredMessage) -> None:
    with socket.socket(socket.AF_UNIX) as connection:
        connection.connect(os.environ["HANDLER_SOCKET"])
        connection.sendall(f"{message.key}\n".encode())
        order = connection.makefile(encoding="utf-8").readline().strip()
    _obey(message.key, order)


async def async_handler(message: DeliveredMessage) -> None:
    reader, writer = await asyncio.open_unix_connection(os.environ["HANDLER_SOCKET"])
    writer.write(f"{message.key}\n".encode())
    await writer.drain()
    order = (await reader.readline()).decode().strip()
    writer.close()
    _obey(message.key, order)
