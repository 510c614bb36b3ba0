"""PostgreSQL's peers: the processes serving one database tell each other, by NOTIFY on one
channel, which queues may have a message due soon, and each listens (LISTEN) on a
connection of its own to wake its long polls: a message offered through one replica
wakes the long polls waiting on another (docs/decisions/0019-listen-notify.md,
docs/operations/scaling.md).

Notifications are sent after the change committed, from a connection of their own,
never inside the offering transaction: PostgreSQL serialises the commits of
transactions that notify, each holding a database-wide lock across its WAL flush,
and 32 clients inserting one row each went from ~5,800 to ~330 commits/s when each
insert also notified (pgbench, decision 19). Names told while a NOTIFY is on its way,
or within SEND_INTERVAL_SECONDS of the last, go out together in the next one, each once.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

from app.storage.dialects.base import PeerEvents

log = logging.getLogger(__name__)

# One channel per database; a notification's payload is a queue name (at most 100
# characters, far under NOTIFY's 8000 bytes), or EVERY_QUEUE.
CHANNEL = "hourglass"
# No queue can be named so (names begin with a letter or a digit): every queue.
EVERY_QUEUE = "*"
# Queue names one NOTIFY statement carries at most; past it, it says EVERY_QUEUE instead.
MOST_NAMES_AT_ONCE = 1000
# A NOTIFY goes out at most this often (what is told meanwhile goes in the next): a
# round trip costs the sending process about what a statement does (~100 µs of CPU), so
# at most ~2% of a core, at up to 5 ms of delay, and only while offers keep coming.
SEND_INTERVAL_SECONDS = 0.005
# Seen in pg_stat_activity (and by the tests that end these connections).
LISTENER_NAME = "hourglass-listener"
SENDER_NAME = "hourglass-notifier"
# The sender's transactions do not wait for their commit to reach the disk: a NOTIFY
# changes no data, and a notification lost in a crash costs a re-check, no message.
_SENDER_OPTIONS = "-c synchronous_commit=off"
_NOTIFY = f"SELECT pg_notify('{CHANNEL}', queue) FROM unnest(%s::text[]) AS queue"
# Seconds before connecting again after the first failure, and at most.
_BACKOFF_FIRST = 0.1
_BACKOFF_MOST = 5.0


async def pause_after(failures: int) -> None:
    """Wait before connecting again after `failures` failed attempts in a row: 0.1 s, 0.2 s,
    … up to 5 s, with jitter (tests put their own in its place)."""
    seconds = min(_BACKOFF_FIRST * 2 ** (failures - 1), _BACKOFF_MOST)
    await asyncio.sleep(seconds * random.uniform(0.5, 1.0))


class PostgresPeers:
    """Tells the other processes on the database which queues may have news (`tell`), and
    calls `woken(queue)` (None: every queue) for what they tell. Use from the event loop."""

    def __init__(
        self,
        connect_args: dict[str, Any],
        woken: Callable[[str | None], None],
        events: PeerEvents,
        *,
        pause: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        """`connect_args`: psycopg.AsyncConnection.connect's keyword arguments for the
        database; `pause(n)` waits after n failed attempts in a row (default `pause_after`)."""
        self._connect_args = connect_args
        self._woken = woken
        self._events = events
        self._pause = pause if pause is not None else pause_after
        self._pending: set[str] = set()
        self._has_pending = asyncio.Event()
        self._sender: psycopg.AsyncConnection[Any] | None = None
        self._sender_pid: int | None = None
        self._tasks: list[asyncio.Task[None]] = []
        # Whether the listener's connection is up.
        self.listening = False

    def tell(self, queue: str | None) -> None:
        """Tell the peers, soon, that `queue` (None: every queue) may have something due."""
        if EVERY_QUEUE not in self._pending:  # else it says all there is to say
            if queue is None or len(self._pending) >= MOST_NAMES_AT_ONCE:
                self._pending = {EVERY_QUEUE}
            else:
                self._pending.add(queue)
        self._has_pending.set()

    def start(self) -> None:
        """Start listening and sending (in tasks on the running loop)."""
        self._tasks = [
            asyncio.create_task(self._listen(), name="peers:listen"),
            asyncio.create_task(self._send(), name="peers:send"),
        ]

    async def stop(self) -> None:
        """Stop both, and close their connections."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        await self._close_sender()

    # -- listening --------------------------------------------------------------------

    async def _listen(self) -> None:
        failures = 0
        ever_connected = False
        while True:
            try:
                connection = await psycopg.AsyncConnection.connect(
                    **{**self._connect_args, "application_name": LISTENER_NAME, "autocommit": True}
                )
            except Exception as error:  # noqa: BLE001 - the task outlives any failure: logged, tried again
                failures += 1
                self._lost(failures, error)
                await self._pause(failures)
                continue
            try:
                await connection.execute(f"LISTEN {CHANNEL}")
                self._connected(failures, ever_connected)
                ever_connected, failures = True, 0
                async for notification in connection.notifies():
                    if notification.pid == self._sender_pid:
                        continue  # this process's own: its polls were woken already
                    payload = notification.payload
                    self._woken(None if payload == EVERY_QUEUE else payload)
            except Exception as error:  # noqa: BLE001 - the task outlives any failure: logged, tried again
                failures += 1
                self._lost(failures, error)
            finally:
                self.listening = False
                self._events.listener_connected(False)
                await connection.close()
            await self._pause(failures)

    def _connected(self, failures: int, ever_connected: bool) -> None:
        self.listening = True
        self._events.listener_connected(True)
        if ever_connected or failures:
            log.info("listening for peers' notifications again")
            self._events.listener_reconnected()
        # Polls may have missed news meanwhile (or before the first connection): every
        # waiting poll looks once.
        self._woken(None)

    def _lost(self, failures: int, error: Exception) -> None:
        if failures == 1:  # once per outage
            log.warning(
                "not listening for peers' notifications (%s): long polls fall back on "
                "re-checks until the listener reconnects",
                error,
            )

    # -- sending ----------------------------------------------------------------------

    async def _send(self) -> None:
        failures = 0
        while True:
            await self._has_pending.wait()
            self._has_pending.clear()
            names, self._pending = sorted(self._pending), set()
            try:
                sender = await self._sender_connection()
                await sender.execute(_NOTIFY, (names,))
            except Exception as error:  # noqa: BLE001 - the task outlives any failure: logged, tried again
                failures += 1
                await self._close_sender()
                if failures == 1:
                    # Most often a connection that died while idle (a restart): a new one
                    # at once is likely to work.
                    log.warning("could not notify peers (%s): trying again", error)
                else:
                    # Meanwhile the peers' re-checks find these messages.
                    await self._pause(failures - 1)
                for name in names:  # with whatever was told meanwhile
                    self.tell(None if name == EVERY_QUEUE else name)
                continue
            if failures:
                log.info("notifying peers again")
                failures = 0
            self._events.peers_told(len(names))
            # What is told meanwhile waits for the next: under a stream of offers, one
            # NOTIFY per interval carries them all, instead of one round trip per offer.
            await asyncio.sleep(SEND_INTERVAL_SECONDS)

    async def _sender_connection(self) -> psycopg.AsyncConnection[Any]:
        if self._sender is None or self._sender.closed:
            options = f"{self._connect_args.get('options', '')} {_SENDER_OPTIONS}".strip()
            self._sender = await psycopg.AsyncConnection.connect(
                **{
                    **self._connect_args,
                    "options": options,
                    "application_name": SENDER_NAME,
                    "autocommit": True,
                }
            )
            self._sender_pid = self._sender.info.backend_pid
        return self._sender

    async def _close_sender(self) -> None:
        sender, self._sender = self._sender, None
        if sender is not None:
            await sender.close()
