"""Every example in the docs runs as it is written (docs/development.md, "Examples").

Each page's curl commands and Python blocks run in page order against a fresh `hourglass
serve` on SQLite, as a reader would run them against the service the README starts; the
answers a page shows are compared with the service's. A block no test can run here says
why in a comment, or names the test that runs it. The decision records are left out: they
record why a statement or a design is as it is, and their SQL is the statement under
discussion, not an example to run."""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.examples import (
    ROOT,
    Block,
    bind,
    commands,
    file_name,
    json_values,
    kind_of,
    mismatch,
    node_test,
    read_page,
    same_print,
    shown_prints,
)
from tests.support.helpers import wait_until
from tests.support.server import free_port, running_server

PAGES = sorted(
    [ROOT / "README.md", ROOT / "clients/python/README.md", ROOT / "clients/typescript/README.md"]
    + [path for path in (ROOT / "docs").rglob("*.md") if "decisions" not in path.parts],
)
COMMAND_TIMEOUT = 60


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("path", PAGES, ids=_name)
def test_every_block_runs_or_says_why(path):
    page = read_page(path)
    unmarked = [block.where for block in page.blocks if kind_of(block) == "unmarked"]
    assert not unmarked, (
        "blocks no test runs and that do not say why (`<!-- not run: why -->` or "
        f"`<!-- run by: tests/file.py::test_name -->` on the line before): {unmarked}"
    )
    runners = []
    for block in page.blocks:
        if block.marker is None:
            continue
        kind, what = block.marker
        assert what, f"{block.where}: `{kind}:` says nothing"
        if kind == "run by":
            runners.append(_check_runner(block, what))
    for index, block in enumerate(page.blocks):
        if kind_of(block) == "file":
            _check_used(block, page.blocks[index + 1 :], runners)


def _check_runner(block: Block, what: str) -> str:
    file, _, test = what.partition("::")
    runner = ROOT / file
    assert runner.is_file(), f"{block.where}: {file} does not exist"
    source = runner.read_text()
    page = block.page.relative_to(ROOT)
    if node_test(what) is not None:
        # A Node test (the TypeScript client's, run by `npm test`): it names the page.
        assert str(page) in source, f"{block.where}: {file} does not read {page}"
        return source
    defined = {
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    }
    assert test in defined, f"{block.where}: {file} has no {test}"
    by_parts = " / ".join(f'"{part}"' for part in page.parts)  # ROOT / "docs" / "x.md"
    assert str(page) in source or by_parts in source, f"{block.where}: {file} does not read {page}"
    return source


def _check_used(block: Block, later: list[Block], runners: list[str]) -> None:
    """A file a page shows is run: a later block of the page runs or imports it, or a test
    that runs one of the page's blocks uses it."""
    name = file_name(block)
    stem = re.escape(Path(name).stem)
    uses = re.compile(rf"\b{stem}\b")
    users = [b.text for b in later if kind_of(b) in ("curl", "python", "marked")] + runners
    assert any(uses.search(text) for text in users), f"{block.where}: nothing runs {name}"


RUNNABLE = [path for path in PAGES if read_page(path).runnable]


@pytest.mark.parametrize("path", RUNNABLE, ids=_name)
def test_the_page_runs_as_written(path, tmp_path, monkeypatch):
    page = read_page(path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    bindings: dict[str, str] = {}
    namespace: dict[str, object] = {"__name__": "__docs__"}
    database = f"sqlite:///{tmp_path / 'hourglass.db'}"
    with running_server(database, **page.environment) as server:
        for block in page.runnable:
            kind = kind_of(block)
            if kind == "file":
                (tmp_path / file_name(block)).write_text(bind(block.text, bindings, server.url))
            elif kind == "python":
                output = io.StringIO()
                with contextlib.redirect_stdout(output):
                    code = compile(bind(block.text, bindings, server.url), block.where, "exec")
                    exec(code, namespace)  # noqa: S102 - the page's own example
                _check_prints(block, output.getvalue())
            else:
                _run_commands(block, server.url, bindings)
            _check_alive(server, block)
    for module in [name for name in sys.modules if (tmp_path / f"{name}.py").exists()]:
        del sys.modules[module]  # the page's own files: the next page may write others


def _check_prints(block: Block, output: str) -> None:
    """What a block prints is what the page shows beside its prints, line for line."""
    shown = shown_prints(block)
    if not shown:
        return
    printed = output.splitlines()
    assert len(printed) == len(shown) and all(map(same_print, shown, printed)), (
        f"{block.where}: the page shows it prints {shown}, it printed {printed}"
    )


def _check_alive(server, block: Block) -> None:
    assert server.process is None or server.process.poll() is None, (
        f"{block.where}: the service stopped: {''.join(server.output)}"
    )


def _run_commands(block: Block, url: str, bindings: dict[str, str]) -> None:
    """Runs a block's commands one by one, each answer compared as it comes, so that a lock
    id the service gave one command is the one the next command uses."""
    shown = json_values(block.answer.text) if block.answer is not None else None
    got_all: list[object] = []
    for command in commands(block.text):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", bind(command, bindings, url)],
            check=False,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT,
        )
        assert done.returncode == 0, f"{block.where}: exited {done.returncode}: {done.stderr}"
        if shown is None and not done.stdout.lstrip()[:1] in ("{", "[", *"0123456789"):
            continue  # an answer that is not JSON (/metrics), which the page does not show
        got = json_values(done.stdout)
        if shown is None:
            refused = [value for value in got if _refusal(value)]
            assert not refused, f"{block.where}: refused, and the page shows no answer: {refused}"
            continue
        for value in got:
            index = len(got_all)
            assert index < len(shown), (
                f"{block.answer.where}: the page shows fewer answers: {value}"
            )
            found = mismatch(shown[index], value, bindings)
            assert found is None, f"{block.answer.where}: {found}"
            got_all.append(value)
    if shown is not None:
        assert len(got_all) == len(shown), f"{block.answer.where}: the page shows more answers"


def _refusal(value: object) -> bool:
    """A problem+json answer, or the status code of a command that prints only its code."""
    if isinstance(value, dict):
        return isinstance(value.get("status"), int) and value["status"] >= 400
    return isinstance(value, int) and 400 <= value < 600


WORKERS_PAGE = ROOT / "docs/guide/workers.md"
WORKER_WAIT = 60


def test_the_worker_command(tmp_path):
    """The workers page's `hourglass-worker` command, with the page's tasks.py, handles a
    due message as the page says it does, and stops on SIGTERM, exiting 0."""
    page = read_page(WORKERS_PAGE)
    (tasks,) = [block for block in page.blocks if kind_of(block) == "file"]
    (command,) = [block for block in page.blocks if "hourglass-worker " in block.text]
    (tmp_path / file_name(tasks)).write_text(tasks.text)
    with running_server(f"sqlite:///{tmp_path / 'hourglass.db'}") as server:
        offered = httpx.put(
            f"{server.url}/v1/queues/reminders/messages/user-42/friday",
            json={"payload": {"user": 42, "text": "Your trial ends today"}},
        )
        assert offered.status_code == 201, offered.text
        worker = subprocess.Popen(
            shlex.split(command.text.strip()),
            cwd=tmp_path,
            env={**os.environ, "HOURGLASS_URL": server.url},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        lines: list[str] = []
        handled = threading.Event()

        def read() -> None:
            assert worker.stdout is not None
            for line in worker.stdout:
                lines.append(line)
                if "to user 42: Your trial ends today (delivery 1)" in line:
                    handled.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert handled.wait(WORKER_WAIT), "".join(lines)
            worker.send_signal(signal.SIGTERM)
            assert worker.wait(WORKER_WAIT) == 0, "".join(lines)
        finally:
            worker.kill()
        reader.join(WORKER_WAIT)
        left = httpx.get(f"{server.url}/v1/queues/reminders").json()
        assert left["messages"] == 0, left  # acknowledged


FLOW_CONTROL_PAGE = ROOT / "docs/guide/flow-control.md"


def test_the_groups_example(tmp_path):
    """The flow-control page's groups example, run as the page says (`python producer.py &&
    python worker.py`): three customers side by side, never two reminders of one customer
    at once, each customer's in order, as the output the page shows."""
    page = read_page(FLOW_CONTROL_PAGE)
    files = {file_name(block): block.text for block in page.blocks if kind_of(block) == "file"}
    for name in ("producer.py", "worker.py"):
        (tmp_path / name).write_text(files[name])
    with running_server(f"sqlite:///{tmp_path / 'hourglass.db'}") as server:
        env = {**os.environ, "HOURGLASS_URL": server.url}
        subprocess.run(
            [sys.executable, "producer.py"], cwd=tmp_path, env=env, check=True, timeout=60
        )
        worker = subprocess.Popen(
            [sys.executable, "worker.py"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        events: list[tuple[str, str, str]] = []  # (group, start | done, key)
        finished = threading.Event()

        def read() -> None:
            assert worker.stdout is not None
            for line in worker.stdout:
                _, group, what, key = line.split()
                events.append((group, what, key))
                if sum(what == "done" for _, what, _ in events) == 9:
                    finished.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            assert finished.wait(WORKER_WAIT), events
            worker.send_signal(signal.SIGINT)
            worker.wait(WORKER_WAIT)
        finally:
            worker.kill()
        reader.join(WORKER_WAIT)
    running: dict[str, str] = {}
    at_once = 0
    for group, what, key in events:
        if what == "start":
            assert group not in running, f"two of {group} at once: {running[group]}, {key}"
            running[group] = key
            at_once = max(at_once, len(running))
        else:
            assert running.pop(group) == key
    for group in ("4711", "5120", "3321"):
        started = [key for g, what, key in events if g == group and what == "start"]
        assert started == [f"customer/{group}/reminder-{n}" for n in range(3)], started
    assert at_once == 3, "the customers were not served side by side"


PUSH_PAGE = ROOT / "docs/guide/push.md"


def test_the_push_receiver(tmp_path):
    """The push page's receiver.py, beside its verify.py, takes a real push from the service
    (signed with the secret it is given) and acknowledges it with its 204."""
    page = read_page(PUSH_PAGE)
    for block in page.blocks:
        if block.lang == "python" and block.text.startswith("# "):
            (tmp_path / file_name(block)).write_text(block.text)
    port = free_port()
    receiver = subprocess.Popen(
        [sys.executable, "receiver.py"],
        cwd=tmp_path,
        env={**os.environ, "HOURGLASS_PUSH_SECRET": "current-secret", "PORT": str(port)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    delivered = threading.Event()

    def read() -> None:
        assert receiver.stdout is not None
        for line in receiver.stdout:
            lines.append(line)
            if "to {'user': 42} delivery 1" in line:
                delivered.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    target = f"http://127.0.0.1:{port}/hourglass"
    try:
        with running_server(
            f"sqlite:///{tmp_path / 'hourglass.db'}",
            HOURGLASS_PUSH_ALLOWED=target,
            HOURGLASS_PUSH_SECRETS="current-secret,previous-secret",
        ) as server:
            settings = httpx.put(
                f"{server.url}/v1/queues/reminders/settings", json={"push": {"url": target}}
            )
            assert settings.status_code == 200, settings.text
            offered = httpx.put(
                f"{server.url}/v1/queues/reminders/messages/user-42", json={"payload": {"user": 42}}
            )
            assert offered.status_code == 201, offered.text
            assert delivered.wait(WORKER_WAIT), "".join(lines)

            def outcomes() -> list[str]:
                history = httpx.get(f"{server.url}/v1/queues/reminders/history").json()
                return [entry["outcome"] for entry in history["entries"]]

            # The service's own process acknowledges on the 204: no event reaches the test.
            wait_until(
                lambda: outcomes() == ["acknowledged"],
                WORKER_WAIT,
                "the 204's ack",
                details=outcomes,
            )
    finally:
        receiver.kill()
        reader.join(WORKER_WAIT)


def test_the_readme_is_a_front_door():
    """The README: what Hourglass is, its two set-up commands, a walk-through and links, in
    at most 200 lines; everything else is a page of the docs site."""
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert "pip install . && hourglass serve" in text
    assert "pip install -e '.[test]' -e ./clients/python && pytest" in text
