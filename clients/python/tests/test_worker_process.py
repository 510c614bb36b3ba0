"""`hourglass-worker` as a user runs it: from a fresh venv holding only the client, against
a real server, stopped by a signal in the middle of a batch."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hourglass_client import Client, NotFound, Offer

HERE = Path(__file__).resolve().parent
CLIENT = HERE.parent
WAIT = 30
# Every line the worker writes is a log line of its own (no tracebacks spill over).
LOG_LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) \S+: ")


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new venv with `pip install ./clients/python` (from the package index, as a user
    would: httpx and its few dependencies) and nothing else."""
    root = tmp_path_factory.mktemp("venv") / "worker"
    # Built from a copy: a build writes into the folder it builds (build/, *.egg-info).
    source = shutil.copytree(
        CLIENT,
        root.parent / "hourglass-client",
        ignore=shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__"),
    )
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, timeout=120)
    install = subprocess.run(
        [str(root / "bin" / "pip"), "install", "--quiet", str(source)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    return root


def test_the_venv_holds_the_client_and_not_the_server(venv):
    python = str(venv / "bin" / "python")
    imports = "import hourglass_client, httpx; import app"
    result = subprocess.run(
        [python, "-c", imports], check=False, capture_output=True, text=True, cwd="/"
    )
    assert "No module named 'app'" in result.stderr
    listed = subprocess.run(
        [python, "-m", "pip", "list", "--format=json", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    )
    installed = {package["name"].lower() for package in json.loads(listed.stdout)}
    installed -= {"pip", "setuptools"}
    assert {"hourglass-client", "httpx"} <= installed
    assert installed <= {"hourglass-client", "httpx", "httpcore", "h11", "anyio", "idna"} | {
        "certifi",
        "sniffio",
        "typing_extensions",
        "typing-extensions",
        "exceptiongroup",
    }


def test_help_reads_well(venv):
    result = subprocess.run(
        [str(venv / "bin" / "hourglass-worker"), "--help"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("usage: hourglass-worker [-h] --queue QUEUE")
    for words in ["module:function", "--concurrency N", "SIGTERM", "HOURGLASS_URL", "Retry"]:
        assert words in result.stdout


def test_a_handler_that_cannot_be_loaded_is_one_line_and_status_2(venv, tmp_path):
    result = subprocess.run(
        [str(venv / "bin" / "hourglass-worker"), "no_such_module:handler", "--queue", "q"],
        check=False,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (
        "hourglass-worker: error: cannot load 'no_such_module:handler': "
        "ModuleNotFoundError: No module named 'no_such_module'"
    )


class WorkerProcess:
    """`hourglass-worker` from the venv, its handlers reporting to this test (see
    signal_handlers.py)."""

    def __init__(self, venv: Path, tmp_path: Path, url: str, queue: str, *options: str) -> None:
        self.done_file = tmp_path / "done"
        self.done_file.touch()
        self.listener = socket.socket(socket.AF_UNIX)
        self.listener.bind(str(tmp_path / "handlers"))
        self.listener.listen(64)
        self.listener.settimeout(WAIT)
        env = {
            **os.environ,
            "HANDLER_SOCKET": str(tmp_path / "handlers"),
            "DONE_FILE": str(self.done_file),
        }
        command = [str(venv / "bin" / "hourglass-worker"), "--queue", queue, "--url", url]
        self.process = subprocess.Popen(
            [*command, *options], cwd=HERE, env=env, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []
        self.stopping = threading.Event()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line.rstrip("\n"))
            if "stopping (" in line:
                self.stopping.set()

    def handlers(self, count: int) -> list[tuple[str, socket.socket]]:
        """The next `count` handlers to start: their keys, and where to send their orders."""
        started = []
        for _ in range(count):
            connection, _ = self.listener.accept()
            key = connection.makefile(encoding="utf-8").readline().strip()
            started.append((key, connection))
        return started

    def signal(self, number: int) -> None:
        self.process.send_signal(number)
        assert self.stopping.wait(WAIT), "\n".join(self.lines)

    def finish(self) -> int:
        status = self.process.wait(WAIT)
        self.reader.join(WAIT)
        self.listener.close()
        return status

    def done(self) -> list[str]:
        return self.done_file.read_text().split()


def _assert_nothing_lost_or_held(url: str, queue: str, keys: list[str], done: list[str]) -> dict:
    """Every key either acknowledged once (its handler finished) or back in the queue, not
    leased; the messages still there, by key."""
    assert len(done) == len(set(done))
    left = {}
    with Client(url) as hourglass:
        acknowledged = [entry.key for entry in hourglass.iter_history(queue)]
        assert sorted(acknowledged) == sorted(done)
        for key in keys:
            try:
                message = hourglass.get(queue, key)
            except NotFound:
                assert key in done
                continue
            assert key not in done
            assert message.state in {"ready", "scheduled"}, message
            left[key] = message
        assert hourglass.stats(queue).leased == 0
    return left


@pytest.mark.parametrize(
    ("number", "handler"),
    [(signal.SIGTERM, "signal_handlers:handler"), (signal.SIGINT, "signal_handlers:async_handler")],
    ids=["SIGTERM-threads", "SIGINT-asyncio"],
)
def test_a_signal_mid_batch_finishes_what_runs_and_leaves_the_rest(
    service, venv, tmp_path, queue, number, handler
):
    keys = [f"m{index}" for index in range(10)]
    with Client(service.url) as hourglass:
        hourglass.offer_many(queue, [Offer(key, key) for key in keys])
    worker = WorkerProcess(
        venv, tmp_path, service.url, queue, handler, "--concurrency", "4", "--lease", "2"
    )
    running = worker.handlers(4)
    worker.signal(number)
    for (_key, connection), order in zip(running, ["ok", "ok", "fail", "retry"], strict=True):
        connection.sendall(f"{order}\n".encode())
        connection.close()
    assert worker.finish() == 0, "\n".join(worker.lines)

    started = [key for key, _ in running]
    assert sorted(worker.done()) == sorted(started[:2])
    left = _assert_nothing_lost_or_held(service.url, queue, keys, worker.done())
    assert left[started[2]].state == "ready" and left[started[2]].deliveries == 1  # released
    assert left[started[3]].state == "scheduled"  # Retry(3600)
    unstarted = set(keys) - set(started)
    assert all(left[key].state == "ready" and left[key].deliveries == 0 for key in unstarted)
    assert all(LOG_LINE.match(line) for line in worker.lines), worker.lines
    name = signal.Signals(number).name
    assert any(f"stopping ({name})" in line for line in worker.lines)
    assert "worker stopped: 2 done, 1 failed, 1 retried" in worker.lines[-1]


def test_a_second_signal_gives_the_running_messages_back_at_once(service, venv, tmp_path, queue):
    keys = ["a", "b", "c"]
    with Client(service.url) as hourglass:
        hourglass.offer_many(queue, [Offer(key, key) for key in keys])
    worker = WorkerProcess(
        venv, tmp_path, service.url, queue, "signal_handlers:handler", "--concurrency", "2"
    )
    running = worker.handlers(2)
    worker.signal(signal.SIGTERM)
    worker.process.send_signal(signal.SIGTERM)
    assert worker.finish() == 1, "\n".join(worker.lines)  # without its handlers finishing
    for _key, connection in running:
        connection.close()

    left = _assert_nothing_lost_or_held(service.url, queue, keys, [])
    assert {key: message.deliveries for key, message in left.items()} == {
        **{key: 1 for key, _ in running},
        **{key: 0 for key in set(keys) - {key for key, _ in running}},
    }
    assert all(message.state == "ready" for message in left.values())
    assert all(LOG_LINE.match(line) for line in worker.lines), worker.lines
