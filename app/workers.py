"""`hourglass serve --workers N`: N server processes on one port, under one parent.

The parent binds and listens on the port, and forks the workers once the schema is
migrated. Each worker is an `hourglass serve` of its own on the shared listening socket
(the kernel hands each new connection to one of them): its own event loop, database
pool (`HOURGLASS_POOL_SIZE` each), connection caps (`HOURGLASS_MAX_CONNECTIONS` and
`…_PER_CLIENT` each), cron manager, history pruner and push dispatcher (each built for
several replicas on one database: claims by row locks and unique keys). Metrics go to
prometheus-client's files in a private directory the parent makes, and a scrape of
any worker adds them up (app/metrics/multiprocess.py).

Stopping: SIGTERM or SIGINT to the parent goes to every worker as SIGTERM; each does what
one process does (waiting polls answer empty at once, requests in flight finish within
--graceful-shutdown), and the parent exits 0 once all have ended. A worker that ends
otherwise (crashed, killed, failed to start) is logged, the others are stopped the same
way and the parent exits 1: as one process that crashes ends, so the process manager
that restarts one restarts this one (no restart here, so a worker that cannot start
does not loop). A worker whose parent is gone stops by itself.
"""

from __future__ import annotations

import logging
import os
import selectors
import signal
import socket
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from tempfile import mkdtemp
from types import FrameType

from app.server import HourglassServer

logger = logging.getLogger(__name__)

# prometheus-client reads it when it is first imported (app/metrics/multiprocess.py checks).
METRICS_DIRECTORY_VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# What a worker writes on its readiness pipe once it serves.
READY = b"."
# uvicorn's default backlog.
BACKLOG = 2048


@contextmanager
def metrics_directory() -> Iterator[str]:
    """A fresh private directory for prometheus-client's files, named in the environment
    before prometheus_client is imported (call this first); removed at the end."""
    if "prometheus_client" in sys.modules:
        raise RuntimeError("prometheus_client was imported before its directory was set")
    path = mkdtemp(prefix="hourglass-metrics-")
    os.environ[METRICS_DIRECTORY_VARIABLE] = path
    try:
        yield path
    finally:
        for file in Path(path).iterdir():
            file.unlink()
        Path(path).rmdir()


class WorkerServer(HourglassServer):
    """The server of one worker: tells the parent when it serves, writes its count of open
    connections for the metrics, and stops if its parent is gone."""

    def __init__(
        self,
        *args: object,
        ready: Callable[[], None],
        tick: Callable[[], None],
        early_signals: list[int],
        **kwargs: object,
    ) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._ready = ready
        self._tick = tick
        self._early_signals = early_signals
        self._parent = os.getppid()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        # A stop asked for between the fork and uvicorn's own signal handlers.
        for sig in self._early_signals:
            self.handle_exit(sig, None)
        await super().startup(sockets)
        if self.started and not self.should_exit:
            self._ready()

    async def on_tick(self, counter: int) -> bool:
        self._tick()
        if os.getppid() != self._parent and not self.should_exit:
            logger.warning("the parent process %d is gone: stopping", self._parent)
            self.handle_exit(signal.SIGTERM, None)
        return await super().on_tick(counter)


# run_worker(ready, early_signals): builds and runs one worker's server, in the child.
RunWorker = Callable[[Callable[[], None], list[int]], None]


@dataclass
class _Worker:
    pid: int
    ready_pipe: int | None  # read end, until the worker said it serves (or ended)


class Supervisor:
    """Forks `count` workers, passes stop signals on, and reports how they ended."""

    def __init__(
        self,
        count: int,
        run_worker: RunWorker,
        *,
        address: str,
        metrics_dir: str | None = None,
    ) -> None:
        self.count = count
        self.run_worker = run_worker
        self.address = address
        self.metrics_dir = metrics_dir
        self.workers: dict[int, _Worker] = {}
        self.stopping = False
        self.exit_code = 0
        self._selector = selectors.DefaultSelector()
        self._started = 0

    def run(self) -> int:
        """Serve until told to stop or a worker ends; the exit code (0: stopped as asked)."""
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        handled = (*STOP_SIGNALS, signal.SIGCHLD)
        # Each signal's number arrives on the pipe; the handlers only keep the default
        # actions (ending the parent, ignoring SIGCHLD) away.
        previous_handlers = {sig: signal.signal(sig, _note) for sig in handled}
        previous_wakeup = signal.set_wakeup_fd(wake_write)
        self._selector.register(wake_read, selectors.EVENT_READ)
        if self.metrics_dir is not None:
            logger.info("the workers' metrics: files in %s (removed at exit)", self.metrics_dir)
        try:
            for _ in range(self.count):
                if not self.stopping:
                    self._start_worker(inherited=(wake_read, wake_write))
            while self.workers:
                for key, _events in self._selector.select():
                    if key.fd == wake_read:
                        self._on_signals(os.read(wake_read, 64))
                    else:
                        self._on_ready_pipe(key.fd)
                self._reap()
        finally:
            signal.set_wakeup_fd(previous_wakeup)
            for sig, handler in previous_handlers.items():
                signal.signal(sig, handler)
            self._selector.close()
            os.close(wake_read)
            os.close(wake_write)
        logger.info("every worker has stopped")
        return self.exit_code

    def _start_worker(self, inherited: tuple[int, ...]) -> None:
        ready_read, ready_write = os.pipe()
        # A stop signal that came between the fork and the worker's own handlers would
        # run the parent's (and be lost to the worker): held back until those are set.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pid = os.fork()
            if pid == 0:  # the worker
                os.close(ready_read)
                # Not the parent's: its wake-up pipe, its selector, the other workers' pipes.
                inherited = (*inherited, self._selector.fileno(), *self._pipes())
                _become_worker(self.run_worker, ready_write, inherited, mask)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.close(ready_write)
        self.workers[pid] = _Worker(pid, ready_read)
        self._selector.register(ready_read, selectors.EVENT_READ)
        logger.info("worker %d started", pid)

    def _pipes(self) -> list[int]:
        return [
            worker.ready_pipe for worker in self.workers.values() if worker.ready_pipe is not None
        ]

    def _on_signals(self, received: bytes) -> None:
        for number in received:
            if number in STOP_SIGNALS:
                self._stop(f"{signal.Signals(number).name} received")

    def _on_ready_pipe(self, fd: int) -> None:
        said = os.read(fd, 1)
        self._selector.unregister(fd)
        os.close(fd)
        for worker in self.workers.values():
            if worker.ready_pipe == fd:
                worker.ready_pipe = None
        if said == READY:
            self._started += 1
            if self._started == self.count and not self.stopping:
                logger.info(
                    "Uvicorn running on %s with %d workers (Press CTRL+C to quit)",
                    self.address,
                    self.count,
                )
        # Else the worker ended before it served: _reap reports it.

    def _reap(self) -> None:
        while self.workers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            worker = self.workers.pop(pid, None)
            if worker is None:
                continue
            if worker.ready_pipe is not None:
                self._selector.unregister(worker.ready_pipe)
                os.close(worker.ready_pipe)
            if self.metrics_dir is not None:
                from prometheus_client import multiprocess

                multiprocess.mark_process_dead(pid, self.metrics_dir)
            how = _how_it_ended(status)
            if self.stopping and os.waitstatus_to_exitcode(status) == 0:
                logger.info("worker %d stopped", pid)
                continue
            logger.error("worker %d %s", pid, how)
            self.exit_code = 1
            self._stop(f"worker {pid} {how}")

    def _stop(self, why: str) -> None:
        """Tell every worker to stop, as SIGTERM tells one process (again on each signal)."""
        if not self.stopping:
            logger.info("stopping %d workers: %s", len(self.workers), why)
        self.stopping = True
        for pid in self.workers:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass  # ended; reaped next


def _note(sig: int, frame: FrameType | None) -> None:
    """The signal is read from the wake-up pipe."""


def _become_worker(
    run_worker: RunWorker, ready_write: int, inherited: tuple[int, ...], mask: Iterable[int]
) -> None:
    """In the forked child (stop signals blocked): run one worker, then end this process
    (never return)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        for fd in inherited:
            os.close(fd)
        early_signals: list[int] = []
        for sig in STOP_SIGNALS:
            # Until uvicorn takes them; also what its re-raise of the signal at the end
            # meets, so the worker ends with 0 after a stop, not by the signal.
            signal.signal(sig, lambda number, _frame: early_signals.append(number))
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a stop held back arrives now

        def ready() -> None:
            os.write(ready_write, READY)
            os.close(ready_write)

        run_worker(ready, early_signals)
        code = 0
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
    except BaseException:
        logger.exception("worker %d failed", os.getpid())
    finally:
        logging.shutdown()
        os._exit(code)


def _how_it_ended(status: int) -> str:
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        return f"was killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"
