"""The service as a real process on a free port, for tests (and benchmarks) that need real HTTP."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import uvicorn

from app.server import ConnectionLimits, HourglassServer

STARTUP_TIMEOUT = 60
STOP_TIMEOUT = 30


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class _ThreadServer(HourglassServer):
    def __init__(self, config: uvicorn.Config, app: Any) -> None:
        super().__init__(
            config,
            stopping=lambda: app.state.stopping(),
            limits=ConnectionLimits.from_settings(app.state.settings),
            events=app.state.metrics,
        )
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


@contextmanager
def serving(app: Any) -> Iterator[tuple[int, HourglassServer]]:
    """Serve the app as `hourglass serve` does, on a thread of this process; yields the port
    and the server once the app has started (its lifespan has run)."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(64)
    server = _ThreadServer(uvicorn.Config(app, log_level="warning"), app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]}, daemon=True)
    thread.start()
    try:
        if not server.ready.wait(STARTUP_TIMEOUT):
            raise RuntimeError("the app did not start")
        yield listening.getsockname()[1], server
    finally:
        server.should_exit = True
        thread.join(STOP_TIMEOUT)
        listening.close()


@dataclass(frozen=True)
class Server:
    url: str
    port: int
    pid: int
    output: list[str]  # its log lines so far
    process: subprocess.Popen[str] | None = None


@contextmanager
def running_server(
    database_url: str,
    *,
    open_files: tuple[int, int] | None = None,
    workers: int = 1,
    **environment: str,
) -> Iterator[Server]:
    """`hourglass serve` against `database_url`, yielded once it accepts requests.

    `open_files` sets the process's (soft, hard) limit of open files, as a shell's
    `ulimit -n` would before starting it. `workers`: its --workers (`pid` is the parent's).
    """
    port = free_port()
    env = {**os.environ, "HOURGLASS_DATABASE_URL": database_url, **environment}
    command = [sys.executable, "-m", "app", "serve", "--port", str(port), "--no-access-log"]
    if workers != 1:
        command += ["--workers", str(workers)]
    if open_files is not None:
        # util-linux's prlimit sets the limit, then execs the command (same process).
        command = ["prlimit", f"--nofile={open_files[0]}:{open_files[1]}", "--", *command]
    process = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    started = threading.Event()
    output: list[str] = []

    def read_output() -> None:
        # Keep draining stderr so the server never blocks on a full pipe.
        assert process.stderr is not None
        for line in process.stderr:
            output.append(line)
            if "Uvicorn running on" in line:
                started.set()
        started.set()  # the process ended: stop waiting

    reader = threading.Thread(target=read_output, daemon=True)
    reader.start()
    try:
        if not started.wait(STARTUP_TIMEOUT) or process.poll() is not None:
            raise RuntimeError("the server did not start:\n" + "".join(output))
        yield Server(f"http://127.0.0.1:{port}", port, process.pid, output, process)
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        reader.join(STOP_TIMEOUT)
