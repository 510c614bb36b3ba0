"""The `hourglass` command: serve, migrate, openapi, pipeline."""

from __future__ import annotations

import argparse
import enum
import logging
import socket
import sys
from typing import NoReturn

import yaml

from app.config import SettingError, Settings, database_url_setting, load_settings
from app.server import CannotListen, HourglassServer
from app.storage.startup import (
    DatabaseRefused,
    DatabaseUnreachable,
    DatabaseUrl,
    check_database,
    wait_for_database,
)
from app.storage.startup import migrate as migrate_database

log = logging.getLogger("hourglass")


class ExitCode(enum.IntEnum):
    """How the command ends: the one list (docs/operations/startup.md shows it too)."""

    OK = 0
    FAILED = 1
    BAD_SETTING = 2
    DATABASE_UNREACHABLE = 3
    DATABASE_REFUSED = 4
    CANNOT_LISTEN = 5


_EXIT_MEANINGS = {
    ExitCode.OK: (
        "done (serve, told to stop by SIGTERM or SIGINT: one process ends as the signal "
        "does, --workers with 0)"
    ),
    ExitCode.FAILED: "anything else: the log or traceback says what",
    ExitCode.BAD_SETTING: "a command-line option or a HOURGLASS_* setting is not accepted",
    ExitCode.DATABASE_UNREACHABLE: "the database does not answer (after --wait-for-database)",
    ExitCode.DATABASE_REFUSED: (
        "the database refused: credentials, an unknown database, a file it cannot open, "
        "a schema this release cannot migrate"
    ),
    ExitCode.CANNOT_LISTEN: "cannot listen: the address is in use, not this machine's, or not allowed",
}
# Start-up failures told in a line or two, without a traceback, and how each ends the command.
_FAILURE_EXIT_CODES: dict[type[Exception], ExitCode] = {
    SettingError: ExitCode.BAD_SETTING,
    DatabaseUnreachable: ExitCode.DATABASE_UNREACHABLE,
    DatabaseRefused: ExitCode.DATABASE_REFUSED,
    CannotListen: ExitCode.CANNOT_LISTEN,
}
EXIT_CODES_HELP = "exit codes:\n" + "\n".join(
    f"  {code.value}  {meaning}" for code, meaning in _EXIT_MEANINGS.items()
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors told in one line (its usage is a screenful for serve)."""

    def error(self, message: str) -> NoReturn:
        self.exit(ExitCode.BAD_SETTING, f"{self.prog}: {message} (see {self.prog} --help)\n")


def _port(text: str) -> int:
    """An argparse type: a TCP port (0: one the system picks)."""
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port: accepted 0 to 65535")
    return port


def _seconds(text: str) -> float:
    """An argparse type: a duration in seconds, 0 or more."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not accepted: a number of seconds, 0 or more"
        )
    return seconds


def _database_ready(arguments: argparse.Namespace, settings: Settings, *, migrate: bool) -> None:
    """Wait for the database if asked (--wait-for-database, HOURGLASS_WAIT_FOR_DATABASE),
    then migrate it if `migrate`: DatabaseUnreachable or DatabaseRefused otherwise."""
    database = DatabaseUrl(settings.database_url)
    seconds = arguments.wait_for_database
    if seconds is None:
        seconds = settings.wait_for_database
    wait_for_database(database, seconds, say=log.warning, check=check_database)
    if migrate:
        migrate_database(database)


def _serve(arguments: argparse.Namespace, settings: Settings) -> None:
    if arguments.workers > 1:
        _serve_workers(arguments, settings)
        return
    from app.logs import configure_logging
    from app.main import create_app
    from app.server import ConnectionLimits, HourglassServer, bind_sockets, close_sockets

    log_format = arguments.log_format or settings.log_format
    configure_logging(arguments.log_level, json_lines=log_format == "json")
    # The address first, then the database: a port in use stops it before the database
    # is touched; the sockets listen only once the server starts (_run_server).
    sockets = bind_sockets(arguments.host, arguments.port)
    try:
        _database_ready(arguments, settings, migrate=settings.auto_migrate)
        app = create_app(settings)
        server = HourglassServer(
            _server_config(arguments, app),
            stopping=lambda: app.state.stopping(),
            limits=ConnectionLimits.from_settings(settings),
            events=app.state.metrics,
        )
        _run_server(server, sockets)
    finally:
        close_sockets(sockets)


def _server_config(arguments: argparse.Namespace, app: object):  # -> uvicorn.Config
    import uvicorn

    return uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=arguments.host,
        port=arguments.port,
        log_config=None,  # configure_logging's handlers serve uvicorn's loggers too
        log_level=arguments.log_level,
        timeout_graceful_shutdown=arguments.graceful_shutdown,
        access_log=arguments.access_log,
    )


def _serve_workers(arguments: argparse.Namespace, settings: Settings) -> None:
    """`serve --workers N` with N > 1: a parent and N server processes (app/workers.py).
    The same order as with one: the address, the database, then listening."""
    if settings.database_url.startswith("sqlite"):
        raise SettingError(
            f"--workers {arguments.workers} needs PostgreSQL or MariaDB: SQLite takes one "
            "writer at a time, so serve it with one process (no --workers)"
        )
    from app.logs import configure_logging
    from app.server import bind_sockets, close_sockets, start_listening
    from app.workers import metrics_directory

    log_format = arguments.log_format or settings.log_format
    configure_logging(arguments.log_level, json_lines=log_format == "json")
    sockets = bind_sockets(arguments.host, arguments.port)
    try:
        # Once, before the workers start, and before anything is made that a stop signal
        # meanwhile (the default action: the end) would leave behind.
        _database_ready(arguments, settings, migrate=settings.auto_migrate)
        # Then the directory: prometheus-client reads its name when it is imported.
        with metrics_directory() as metrics_dir:
            from app.main import create_app
            from app.server import ConnectionLimits
            from app.workers import BACKLOG, Supervisor, WorkerServer

            start_listening(sockets, BACKLOG)

            def run_worker(ready, early_signals: list[int]) -> None:
                app = create_app(settings, metrics_dir=metrics_dir)
                WorkerServer(
                    _server_config(arguments, app),
                    stopping=lambda: app.state.stopping(),
                    limits=ConnectionLimits.from_settings(settings),
                    events=app.state.metrics,
                    ready=ready,
                    tick=app.state.metrics.sample_connections,
                    early_signals=early_signals,
                ).run(sockets=sockets)

            host, port = arguments.host, arguments.port
            address = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"
            supervisor = Supervisor(
                arguments.workers, run_worker, address=address, metrics_dir=metrics_dir
            )
            code = supervisor.run()
    finally:
        close_sockets(sockets)
    sys.exit(code)


def _positive(text: str) -> int:
    """An argparse type: a whole number, 1 or more."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not accepted: a whole number, 1 or more")
    return value


def _run_server(server: HourglassServer, sockets: list[socket.socket]) -> None:
    """Listen on the bound sockets, then run the server (its app's start-up first)."""
    from uvicorn.server import STARTUP_FAILURE

    from app.server import start_listening

    start_listening(sockets, server.config.backlog)
    server.announce_sockets = True
    try:
        server.run(sockets=sockets)
    except SystemExit as stopped:
        # uvicorn's code for an app that failed to start (logged with its traceback):
        # 3 here means the database does not answer.
        if stopped.code == STARTUP_FAILURE:
            raise SystemExit(ExitCode.FAILED) from None
        raise


def _migrate(arguments: argparse.Namespace, settings: Settings) -> None:
    _database_ready(arguments, settings, migrate=True)


def _openapi(_arguments: argparse.Namespace, settings: Settings) -> None:
    from app.main import create_app

    sys.stdout.write(
        yaml.safe_dump(create_app(settings).openapi(), sort_keys=False, allow_unicode=True)
    )


def _pipeline_import(arguments: argparse.Namespace, settings: Settings) -> None:
    _needs_pipeline_extra()
    _pipeline_database_answers(arguments, settings)
    from app.pipeline.importer import main_import

    main_import(arguments, settings)


def _pipeline_report(arguments: argparse.Namespace, settings: Settings) -> None:
    _needs_pipeline_extra()
    _pipeline_database_answers(arguments, settings)
    from app.pipeline.report import main_report

    main_report(arguments, settings)


def _pipeline_database_answers(arguments: argparse.Namespace, settings: Settings) -> None:
    """Check the job's database URL and that the database answers, before Spark starts."""
    if arguments.database_url:
        arguments.database_url = database_url_setting("--database-url", arguments.database_url)
        check_database(DatabaseUrl(arguments.database_url, "--database-url"))
    else:
        check_database(DatabaseUrl(settings.database_url))


def _needs_pipeline_extra() -> None:
    import importlib.util

    missing = [
        name
        for name in ("pyspark", "pyarrow", "matplotlib")
        if importlib.util.find_spec(name) is None
    ]
    if missing:
        sys.exit(
            f"hourglass pipeline needs {', '.join(missing)}: "
            "pip install 'hourglass[pipeline]' (from a clone: pip install '.[pipeline]')"
        )


def _add_pipeline(commands) -> None:
    from app.pipeline import FORMATS

    pipeline = commands.add_parser("pipeline", help="Spark jobs: bulk import, delivery reports")
    jobs = pipeline.add_subparsers(dest="job", required=True)
    spark = argparse.ArgumentParser(add_help=False)
    spark.add_argument("--master", help="Spark master URL (default: local[*], or spark-submit's)")
    spark.add_argument(
        "--jars", action="append", default=[], help="extra jars, e.g. a JDBC driver (repeatable)"
    )
    spark.add_argument("--database-url", help="default: HOURGLASS_DATABASE_URL")

    job = jobs.add_parser(
        "import",
        parents=[spark],
        help="schedule every valid row of a Parquet, CSV or JSON-lines dataset",
    )
    job.add_argument("input", help="a file or a directory of files")
    job.add_argument("--format", choices=FORMATS, help="default: from the file name")
    job.add_argument("--queue", help="the queue of every row (for a file without a queue column)")
    for field in ("queue", "key", "payload", "scheduled_at", "priority", "group"):
        job.add_argument(
            f"--{field.replace('_', '-')}-column",
            default=field,
            metavar="NAME",
            help=f"the input column holding `{field}` (default: {field})",
        )
    # A row's expiry, as a message's: a time, or seconds after it is due (a row that fills
    # both is rejected, as the API refuses a body with both).
    job.add_argument(
        "--expires-at-column",
        default="expires_at",
        metavar="NAME",
        help="the input column holding `expires_at`, when a row expires: RFC 3339 text or a "
        "timestamp (default: expires_at)",
    )
    job.add_argument(
        "--ttl-column",
        default="ttl",
        metavar="NAME",
        help="the input column holding `ttl`, seconds after a row is due until it expires: "
        "a number (default: ttl)",
    )
    job.add_argument(
        "--if-exists",
        choices=["update", "ignore"],
        default="update",
        help="when a key is scheduled already (default: update, as the API)",
    )
    job.add_argument("--rejects", help="where invalid rows go, as Parquet (default: INPUT.rejects)")
    job.add_argument("--batch-size", type=int, default=None, help=argparse.SUPPRESS)
    job.set_defaults(run=_pipeline_import)

    report = jobs.add_parser(
        "report",
        parents=[spark],
        help="delivery statistics per queue and hour, a forecast, charts",
    )
    report.add_argument(
        "--output", default="hourglass-report", help="directory (default: hourglass-report)"
    )
    report.add_argument(
        "--days", type=int, default=7, help="how far ahead the forecast looks (default: 7)"
    )
    report.set_defaults(run=_pipeline_report)


def main(argv: list[str] | None = None) -> None:
    parser = _Parser(
        prog="hourglass",
        description="Hourglass delayed-message service",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve",
        help="run the HTTP service (migrates first unless HOURGLASS_AUTO_MIGRATE=0)",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8080, help="0 to 65535 (default: 8080)")
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument(
        "--graceful-shutdown",
        type=_seconds,
        default=25,
        metavar="SECONDS",
        help="on SIGTERM, how long in-flight requests may take to finish",
    )
    serve.add_argument(
        "--log-format",
        choices=["text", "json"],
        help="text for people, JSON lines for log pipelines (default: HOURGLASS_LOG_FORMAT, text)",
    )
    serve.add_argument(
        "--access-log",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="log every request (default: on)",
    )
    serve.add_argument(
        "--workers",
        type=_positive,
        default=1,
        metavar="N",
        help="server processes on the port (default: 1); needs PostgreSQL or MariaDB. "
        "Each has its own database pool (HOURGLASS_POOL_SIZE), connection caps "
        "(HOURGLASS_MAX_CONNECTIONS, HOURGLASS_MAX_CONNECTIONS_PER_CLIENT) and push "
        "concurrency per queue; /metrics adds the processes up",
    )
    _add_wait_for_database(serve)
    serve.set_defaults(run=_serve)

    migrate = commands.add_parser(
        "migrate",
        help="upgrade the database schema to this release",
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_wait_for_database(migrate)
    migrate.set_defaults(run=_migrate)

    openapi = commands.add_parser("openapi", help="print the OpenAPI document (YAML)")
    openapi.set_defaults(run=_openapi)

    _add_pipeline(commands)

    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    try:
        arguments.run(arguments, load_settings())
    except tuple(_FAILURE_EXIT_CODES) as failure:
        # One or two lines the operator can act on, no traceback; nothing was left running.
        sys.stderr.write(f"hourglass {arguments.command}: {failure}\n")
        code = next(code for kind, code in _FAILURE_EXIT_CODES.items() if isinstance(failure, kind))
        raise SystemExit(code) from None


def _add_wait_for_database(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--wait-for-database",
        type=_seconds,
        metavar="SECONDS",
        help="wait up to this long for a database that does not answer yet, saying so every "
        "few seconds (default: HOURGLASS_WAIT_FOR_DATABASE, 0)",
    )


if __name__ == "__main__":
    main()
