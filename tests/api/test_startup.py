"""Start-up mistakes, as an operator makes them: each real command ends in a line or two
naming the setting, its value (passwords masked) and what is accepted, with its own exit
code, and leaves nothing listening; `--wait-for-database` waits for a database that comes
up later."""

from __future__ import annotations

import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from app.__main__ import EXIT_CODES_HELP, ExitCode
from tests.support.proxy import TcpProxy
from tests.support.server import free_port

ROOT = Path(__file__).resolve().parents[2]
STARTUP_PAGE = ROOT / "docs" / "operations" / "startup.md"
COMMAND_TIMEOUT = 60
SECRET = "s3cret-pw"


def _hourglass(*arguments: str, **environment: str) -> subprocess.CompletedProcess:
    env = {name: value for name, value in os.environ.items() if not name.startswith("HOURGLASS_")}
    env.setdefault("HOURGLASS_DATABASE_URL", "sqlite://")
    env.update(environment)
    return subprocess.run(
        [sys.executable, "-m", "app", *arguments],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )


def _told(result: subprocess.CompletedProcess, command: str = "serve") -> str:
    """The failure's line (after any log lines), checked to be the last, with no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines, result
    assert lines[-1].startswith(f"hourglass {command}: "), result.stderr
    return lines[-1]


def _nothing_listens(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _closed_port() -> int:
    """A port on loopback where nothing listens."""
    return free_port()


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("HOURGLASS_DEFAULT_LEASE", "abc", "a number of seconds, at least 1, at most 43200"),
        ("HOURGLASS_LOCK_TIMEOUT", "0", "a number of seconds, more than 0, at most 3600"),
        ("HOURGLASS_POOL_SIZE", "0", "a whole number, at least 1"),
        ("HOURGLASS_MAX_PAYLOAD_BYTES", "1.5", "a whole number, at least 1"),
        ("HOURGLASS_MAX_REQUEST_BYTES", "16M", "a whole number, at least 1"),
        ("HOURGLASS_HISTORY_RETENTION", "7d", "a number of seconds, at least 1"),
        ("HOURGLASS_WAIT_FOR_DATABASE", "-5", "a number of seconds, at least 0"),
        ("HOURGLASS_AUTO_MIGRATE", "maybe", "true or false"),
        ("HOURGLASS_HISTORY", "2", "true or false"),
        ("HOURGLASS_LOG_FORMAT", "xml", "one of text, json"),
        ("HOURGLASS_API_TOKENS", "=x", "a token is empty; accepted: comma-separated `token`"),
        ("HOURGLASS_METRICS_TOKENS", " , ", "no value between the commas"),
        ("HOURGLASS_PUSH_SECRETS", ",", "no value between the commas"),
        ("HOURGLASS_PUSH_ALLOWED", "hooks.example.com", "a prefix starts with http:// or https://"),
        (
            "HOURGLASS_DATABASE_URL",
            "foo://bar",
            "unsupported database 'foo'; accepted: postgresql://",
        ),
        ("HOURGLASS_DATABASE_URL", "hourglass.db", "not a database URL; accepted: postgresql://"),
    ],
)
def test_a_setting_not_accepted_is_one_line_naming_it_and_what_is_accepted(
    variable, value, expected
):
    port = free_port()
    result = _hourglass("serve", "--port", str(port), **{variable: value})
    assert result.returncode == ExitCode.BAD_SETTING == 2, result.stderr
    line = _told(result)
    assert result.stderr.strip() == line  # nothing else was said: nothing started
    assert f"{variable}={value!r}" in line or variable == "HOURGLASS_API_TOKENS"
    assert expected in line
    assert _nothing_listens(port)


def test_tokens_and_passwords_are_masked_in_what_is_said():
    tokens = _hourglass("serve", HOURGLASS_API_TOKENS=f"{SECRET},=reports-*")
    assert tokens.returncode == ExitCode.BAD_SETTING
    assert "HOURGLASS_API_TOKENS='***,=reports-*'" in _told(tokens)
    url = _hourglass("migrate", HOURGLASS_DATABASE_URL=f"postgresql://u:{SECRET}@h:5x/db")
    assert url.returncode == ExitCode.BAD_SETTING
    line = _told(url, "migrate")
    assert "HOURGLASS_DATABASE_URL='postgresql://u:***@h:5x/db'" in line
    assert "its port is not a number" in line
    for result in (tokens, url):
        assert SECRET not in result.stderr + result.stdout


def test_every_setting_not_accepted_is_named_at_once():
    result = _hourglass("serve", HOURGLASS_DEFAULT_LEASE="abc", HOURGLASS_POOL_SIZE="none")
    assert result.returncode == ExitCode.BAD_SETTING
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert "HOURGLASS_DEFAULT_LEASE='abc'" in lines[0]
    assert "HOURGLASS_POOL_SIZE='none'" in lines[1]


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            ["serve", "--port", "80808"],
            "argument --port: '80808' is not a port: accepted 0 to 65535",
        ),
        (["serve", "--port", "http"], "argument --port: 'http' is not a port"),
        (["serve", "--graceful-shutdown", "-1"], "a number of seconds, 0 or more"),
        (["migrate", "--wait-for-database", "soon"], "'soon' is not accepted: a number of seconds"),
    ],
)
def test_a_bad_option_is_one_line(arguments, expected):
    result = _hourglass(*arguments)
    assert result.returncode == ExitCode.BAD_SETTING, result.stderr
    assert "Traceback" not in result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert expected in line
    assert line.endswith(f"(see hourglass {arguments[0]} --help)")


def test_an_address_in_use_is_one_line_and_the_database_is_not_touched():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        # A database that does not answer: exit 5, not 3, shows the address came first.
        result = _hourglass(
            "serve",
            "--port",
            str(port),
            HOURGLASS_DATABASE_URL=f"postgresql://root@127.0.0.1:{_closed_port()}/x",
        )
    assert result.returncode == ExitCode.CANNOT_LISTEN == 5, result.stderr
    assert f"cannot listen on 127.0.0.1:{port} (--host, --port): address already in use" in (
        _told(result)
    )


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        # TEST-NET-1 (RFC 5737): no machine has it.
        ("192.0.2.1", "cannot listen on 192.0.2.1:{port} (--host, --port): cannot assign"),
        ("no-such-host.invalid", "cannot listen on no-such-host.invalid:{port} (--host): "),
    ],
)
def test_a_host_that_cannot_be_bound_is_one_line(host, expected):
    port = free_port()
    result = _hourglass("serve", "--host", host, "--port", str(port))
    assert result.returncode == ExitCode.CANNOT_LISTEN, result.stderr
    assert expected.format(port=port) in _told(result)


def _unanswered_url(database_url: str) -> str:
    """The URL at a port of loopback where nothing listens, with a password to mask."""
    return (
        make_url(database_url)
        .set(host="127.0.0.1", port=_closed_port(), password=SECRET)
        .render_as_string(hide_password=False)
    )


@pytest.mark.parametrize("command", ["serve", "migrate"])
@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_a_database_that_does_not_answer_is_one_line(command, server, request):
    url = _unanswered_url(request.getfixturevalue(f"{server}_url"))
    port = free_port()
    arguments = [command, "--port", str(port)] if command == "serve" else [command]
    result = _hourglass(*arguments, HOURGLASS_DATABASE_URL=url)
    assert result.returncode == ExitCode.DATABASE_UNREACHABLE == 3, result.stderr
    line = _told(result, command)
    assert re.search(
        r"the database at \S+:\*\*\*@127\.0\.0\.1:\d+/\S+ \(HOURGLASS_DATABASE_URL\) "
        r"does not answer: ",
        line,
    ), line
    assert SECRET not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2, result.stderr
    assert _nothing_listens(port)


def _refusing_urls(server: str, database_url: str) -> list[tuple[str, str]]:
    """URLs on the test server that it refuses, and what it says."""
    url = make_url(database_url)
    missing = url.set(database="hourglass_startup_missing").render_as_string(hide_password=False)
    stranger = url.set(username="hourglass_startup_nobody", password=SECRET)
    if server == "postgresql":
        return [
            (missing, 'database "hourglass_startup_missing" does not exist'),
            (stranger.render_as_string(hide_password=False), 'role "hourglass_startup_nobody"'),
        ]
    return [
        (missing, "Unknown database 'hourglass_startup_missing'"),
        (stranger.render_as_string(hide_password=False), "Access denied for user"),
    ]


@pytest.mark.parametrize("server", ["postgresql", "mariadb"])
def test_a_database_that_refuses_is_named_and_not_waited_for(server, request):
    for url, said in _refusing_urls(server, request.getfixturevalue(f"{server}_url")):
        port = free_port()
        # Refusals are not waited for: a wrong name stays wrong (a minute's wait would
        # time the test out).
        result = _hourglass(
            "serve", "--port", str(port), "--wait-for-database", "600", HOURGLASS_DATABASE_URL=url
        )
        assert result.returncode == ExitCode.DATABASE_REFUSED == 4, result.stderr
        line = _told(result)
        assert "(HOURGLASS_DATABASE_URL) refused: " in line and said in line, line
        assert "waiting" not in result.stderr
        assert SECRET not in result.stderr
        assert _nothing_listens(port)


def test_a_sqlite_file_that_cannot_be_opened_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'no-such-directory' / 'hourglass.db'}"
    result = _hourglass("migrate", HOURGLASS_DATABASE_URL=url)
    assert result.returncode == ExitCode.DATABASE_REFUSED, result.stderr
    assert "refused: unable to open database file" in _told(result, "migrate")


def test_a_schema_newer_than_this_release_is_refused_and_left_as_it_is(tmp_path):
    url = f"sqlite:///{tmp_path / 'newer.db'}"
    assert _hourglass("migrate", HOURGLASS_DATABASE_URL=url).returncode == 0
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = 'f00dfeedf00d'"))
        result = _hourglass("migrate", HOURGLASS_DATABASE_URL=url)
        assert result.returncode == ExitCode.DATABASE_REFUSED, result.stderr
        line = _told(result, "migrate")
        assert "cannot be migrated by this release: " in line and "f00dfeedf00d" in line
        with engine.connect() as connection:
            revision = connection.execute(text("SELECT version_num FROM alembic_version"))
            assert revision.scalar() == "f00dfeedf00d"
    finally:
        engine.dispose()


def test_pipeline_jobs_check_their_database_url_before_spark_starts(postgresql_url):
    bad = _hourglass("pipeline", "report", "--database-url", f"foo://u:{SECRET}@h/x")
    assert bad.returncode == ExitCode.BAD_SETTING, bad.stderr
    assert "--database-url='foo://u:***@h/x': unsupported database 'foo'" in _told(bad, "pipeline")
    unanswered = _unanswered_url(postgresql_url)
    for arguments in (
        ["pipeline", "import", "rows.csv", "--database-url", unanswered],
        ["pipeline", "report"],
    ):
        result = _hourglass(*arguments, HOURGLASS_DATABASE_URL=unanswered)
        assert result.returncode == ExitCode.DATABASE_UNREACHABLE, result.stderr
        assert "does not answer" in _told(result, "pipeline")
        assert SECRET not in result.stderr


def test_a_report_over_a_database_not_migrated_is_refused_before_spark_starts(tmp_path):
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    result = _hourglass(
        "pipeline", "report", "--output", str(tmp_path / "report"), HOURGLASS_DATABASE_URL=url
    )
    assert result.returncode == ExitCode.DATABASE_REFUSED, result.stderr
    assert "the database's schema is at nothing, this release reads " in _told(result, "pipeline")
    assert not (tmp_path / "report").exists()


def test_the_exit_codes_are_in_the_help_and_the_startup_page():
    result = _hourglass("serve", "--help")
    assert result.returncode == 0
    assert EXIT_CODES_HELP in result.stdout
    page = STARTUP_PAGE.read_text()
    for code in ExitCode:
        line = next(
            line for line in EXIT_CODES_HELP.splitlines() if line.startswith(f"  {code.value} ")
        )
        assert f"| `{code.value}` |" in page, line


def test_the_startup_page_shows_what_a_setting_not_accepted_says():
    """The start-up page's shell session, run as written: its command says the page's line
    and ends with the page's exit status."""
    marker = (
        "<!-- run by: tests/api/test_startup.py::"
        "test_the_startup_page_shows_what_a_setting_not_accepted_says -->\n```text\n"
    )
    page = STARTUP_PAGE.read_text()
    assert marker in page, "the start-up page lost its example of a setting not accepted"
    session = page.split(marker, 1)[1].split("```", 1)[0]
    command, said, status_command, status = session.strip().splitlines()
    assert command.startswith("$ ") and status_command == "$ echo $?", session
    *assignments, program, subcommand = shlex.split(command.removeprefix("$ "))
    assert program == "hourglass", command
    environment = dict(assignment.split("=", 1) for assignment in assignments)
    result = _hourglass(subcommand, **environment)
    assert _told(result, subcommand) == said
    assert result.returncode == int(status)


@pytest.mark.parametrize(
    ("arguments", "environment"),
    [
        (["--wait-for-database", "1"], {"HOURGLASS_WAIT_FOR_DATABASE": "0"}),
        ([], {"HOURGLASS_WAIT_FOR_DATABASE": "1"}),
    ],
    ids=["option", "variable"],
)
def test_a_wait_that_runs_out_ends_as_unreachable_having_said_so(
    postgresql_url, arguments, environment
):
    url = _unanswered_url(postgresql_url)
    result = _hourglass("migrate", *arguments, HOURGLASS_DATABASE_URL=url, **environment)
    assert result.returncode == ExitCode.DATABASE_UNREACHABLE, result.stderr
    assert re.search(
        r"waiting for the database at \S+:\*\*\*@\S+: \S.* \(\d+ s of 1\)", result.stderr
    ), result.stderr
    # How long it really waited: 1 s, or more when the last attempt ran late (2 s once,
    # under CI's load).
    waited = re.search(r"\(waited (\d+) s\)$", _told(result, "migrate"))
    assert waited is not None and int(waited[1]) >= 1, result.stderr
    assert SECRET not in result.stderr


class _Output:
    """A process's stderr lines as they come, waited on with timeouts."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self._process = process
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stderr is not None
        for line in self._process.stderr:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        with self._changed:
            self.lines.append("")  # the end
            self._changed.notify_all()

    def wait_for(self, pattern: str, timeout: float = COMMAND_TIMEOUT) -> str:
        with self._changed:
            found = self._changed.wait_for(
                lambda: any(re.search(pattern, line) for line in self.lines) or "" in self.lines,
                timeout,
            )
            matching = [line for line in self.lines if re.search(pattern, line)]
        assert found and matching, f"no {pattern!r} in:\n{''.join(self.lines)}"
        return matching[0]


@contextmanager
def _started(*arguments: str, **environment: str) -> Iterator[tuple[subprocess.Popen, _Output]]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("HOURGLASS_")}
    env.update(environment)
    process = subprocess.Popen(
        [sys.executable, "-m", "app", *arguments],
        cwd=ROOT,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    output = _Output(process)
    try:
        yield process, output
    finally:
        process.terminate()
        try:
            process.wait(COMMAND_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def test_serve_waits_for_a_database_that_comes_up_later_then_serves(postgresql_url):
    target = make_url(postgresql_url)
    database_port = _closed_port()
    url = target.set(host="127.0.0.1", port=database_port, password=SECRET)
    port = free_port()
    with _started(
        "serve",
        "--port",
        str(port),
        "--wait-for-database",
        "120",
        "--no-access-log",
        HOURGLASS_DATABASE_URL=url.render_as_string(hide_password=False),
    ) as (process, output):
        first = output.wait_for("waiting for the database")
        assert re.search(r"at \S+:\*\*\*@127\.0\.0\.1:\d+/\S+: .+ \(\d+ s of 120\)$", first), first
        assert _nothing_listens(port)  # nothing accepts connections while it waits
        # The database comes up: a proxy to the real one, on the port it was told.
        proxy = TcpProxy(target.host or "127.0.0.1", target.port or 5432)
        proxy.port = database_port
        proxy.start()
        try:
            output.wait_for(r"the database at \S+ answers after \d+ s")
            output.wait_for("Uvicorn running on")
            ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=10)
            assert ready.status_code == 200, ready.text
        finally:
            process.terminate()
            assert (
                process.wait(COMMAND_TIMEOUT) == -signal.SIGTERM
            )  # uvicorn ends as the signal does
            proxy.close()
    assert SECRET not in "".join(output.lines)
    assert _nothing_listens(port)
