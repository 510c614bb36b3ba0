"""How a handler runs: a coroutine function's as a task per message, a plain function's on
threads of the engine's own."""

from __future__ import annotations

import asyncio
import threading
import time
from queue import SimpleQueue
from typing import Any

from hourglass_client.client import AsyncClient
from hourglass_client.worker._engine import Engine, Job
from hourglass_client.worker._tracing import Consumer
from hourglass_client.worker.handlers import AsyncHandler, Handler

# Outcomes of handler threads that finish while others still run are read at most this
# long after (seconds), unless the others finish sooner: a burst is settled together.
_BATCH_WINDOW = 0.001


class TaskEngine(Engine):
    """Runs a coroutine function's handler as a task per message, on the engine's loop."""

    def __init__(
        self,
        client: AsyncClient,
        queue: str,
        handler: AsyncHandler,
        tracing: Consumer | None,
        **settings: Any,
    ):
        super().__init__(client, queue, **settings)
        self.handler = handler
        self.tracing = tracing  # the handler's span, if any (worker/_tracing.py)
        self._loop = asyncio.get_running_loop()

    def _start(self, job: Job) -> None:
        job.task = self._loop.create_task(self._run(job))

    async def _run(self, job: Job) -> None:
        began = time.monotonic()
        try:
            if self.tracing is None:
                await self.handler(job.message)
            else:
                await self.tracing.run_async(self.handler, job.message)
        except asyncio.CancelledError:
            # A second signal gave it back already; if the handler's own, the same.
            if job in self._jobs:
                self._give_back(job)
        except Exception as error:  # noqa: BLE001 - any failure of a handler: _finish reports it
            self._ended(job, error, time.monotonic() - began)
        except BaseException:
            if job in self._jobs:  # SystemExit, KeyboardInterrupt: on their way out
                self._free(job)
            raise
        else:
            self._ended(job, None, time.monotonic() - began)

    def _abandon(self) -> None:
        for job in self._jobs:
            if job.task is not None:
                job.task.cancel()
        super()._abandon()


class ThreadEngine(Engine):
    """Runs a plain function's handler on up to `concurrency` threads of its own.

    The threads take messages from one queue and leave what came of them in a list
    that the loop reads when woken: one wake-up for whatever finished meanwhile, not
    a future, a task and a wake-up per message (`_report` says when).
    """

    def __init__(
        self,
        client: AsyncClient,
        queue: str,
        handler: Handler,
        tracing: Consumer | None,
        **settings: Any,
    ):
        super().__init__(client, queue, **settings)
        self.handler = handler
        self.tracing = tracing  # the handler's span, if any (worker/_tracing.py)
        self._loop = asyncio.get_running_loop()
        self._inbox: SimpleQueue[Job | None] = SimpleQueue()
        self._outbox: list[Job] = []
        self._outbox_lock = threading.Lock()  # guards the outbox and the three below
        self._busy = 0  # threads in a handler
        self._woken = False  # a read of the outbox is on its way to the loop
        self._timed = False  # a read is due in _BATCH_WINDOW
        self._threads: list[threading.Thread] = []

    def _start(self, job: Job) -> None:
        if len(self._jobs) > len(self._threads):  # every thread busy: one more
            thread = threading.Thread(
                target=self._serve, name=f"hourglass-handler_{len(self._threads)}", daemon=True
            )
            thread.start()
            self._threads.append(thread)
        self._inbox.put(job)

    def _serve(self) -> None:
        """A handler thread: run the handler on each message it takes, until told to end."""
        handler, tracing = self.handler, self.tracing
        while (job := self._inbox.get()) is not None:
            with self._outbox_lock:
                self._busy += 1
                self._report()
            began = time.monotonic()
            try:
                if tracing is None:
                    handler(job.message)
                else:
                    tracing.run(handler, job.message)
            except BaseException as error:  # noqa: BLE001 - the loop reports it
                job.error = error
            job.took = time.monotonic() - began
            with self._outbox_lock:
                self._busy -= 1
                self._outbox.append(job)
                self._report()

    def _report(self) -> None:
        """Have the loop read the outbox (with the lock held), unless a read is on its way
        or messages still wait to be taken (the thread that takes the last one decides).
        At once when no handler runs; else within _BATCH_WINDOW, or when the last of them
        returns if sooner: so handlers that finish together are read, and their slots
        polled for, together, and none waits long for a slow one."""
        if self._woken or not self._outbox or not self._inbox.empty():
            return
        try:
            if not self._busy:
                self._woken = True
                self._loop.call_soon_threadsafe(self._collect)
            elif not self._timed:
                self._timed = True
                self._loop.call_soon_threadsafe(
                    self._loop.call_later, _BATCH_WINDOW, self._collect_timed
                )
        except RuntimeError:
            pass  # the loop is closed: the worker gave these messages back and left

    def _collect(self) -> None:
        """On the loop: finish what the threads left since the last read."""
        with self._outbox_lock:
            finished, self._outbox = self._outbox, []
            self._woken = False
        for job in finished:
            self._ended(job, job.error, job.took)

    def _collect_timed(self) -> None:
        with self._outbox_lock:
            self._timed = False
        self._collect()

    def close(self, *, wait: bool) -> None:
        """End the threads once their handlers return; `wait` for that."""
        for _ in self._threads:
            self._inbox.put(None)
        if wait:
            for thread in self._threads:
                thread.join()
