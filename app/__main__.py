"""The `hourglass` command: serve, migrate, openapi, pipeline."""

from __future__ import annotations

import argparse
import logging
import sys

import yaml

from app.config import Settings


def _serve(arguments: argparse.Namespace, settings: Settings) -> None:
    import uvicorn

    from app.logs import configure_logging
    from app.main import create_app
    from app.server import ConnectionLimits, HourglassServer
    from app.storage.schema import upgrade_to_head

    log_format = arguments.log_format or settings.log_format
    configure_logging(arguments.log_level, json_lines=log_format == "json")
    if settings.auto_migrate:
        upgrade_to_head(settings.database_url)
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=arguments.host,
        port=arguments.port,
        log_config=None,  # configure_logging's handlers serve uvicorn's loggers too
        log_level=arguments.log_level,
        timeout_graceful_shutdown=arguments.graceful_shutdown,
        access_log=arguments.access_log,
    )
    HourglassServer(
        config,
        stopping=lambda: app.state.stopping(),
        limits=ConnectionLimits.from_settings(settings),
        events=app.state.metrics,
    ).run()


def _migrate(_arguments: argparse.Namespace, settings: Settings) -> None:
    from app.storage.schema import upgrade_to_head

    upgrade_to_head(settings.database_url)


def _openapi(_arguments: argparse.Namespace, settings: Settings) -> None:
    from app.main import create_app

    sys.stdout.write(
        yaml.safe_dump(create_app(settings).openapi(), sort_keys=False, allow_unicode=True)
    )


def _pipeline_import(arguments: argparse.Namespace, settings: Settings) -> None:
    _needs_pipeline_extra()
    from app.pipeline.importer import main_import

    main_import(arguments, settings)


def _pipeline_report(arguments: argparse.Namespace, settings: Settings) -> None:
    _needs_pipeline_extra()
    from app.pipeline.report import main_report

    main_report(arguments, settings)


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
    for field in ("queue", "key", "payload", "scheduled_at", "priority"):
        job.add_argument(
            f"--{field.replace('_', '-')}-column",
            default=field,
            metavar="NAME",
            help=f"the input column holding `{field}` (default: {field})",
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
    parser = argparse.ArgumentParser(
        prog="hourglass", description="Hourglass delayed-message service"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser(
        "serve", help="run the HTTP service (migrates first unless HOURGLASS_AUTO_MIGRATE=0)"
    )
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument(
        "--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"]
    )
    serve.add_argument(
        "--graceful-shutdown",
        type=float,
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
    serve.set_defaults(run=_serve)

    migrate = commands.add_parser("migrate", help="upgrade the database schema to this release")
    migrate.set_defaults(run=_migrate)

    openapi = commands.add_parser("openapi", help="print the OpenAPI document (YAML)")
    openapi.set_defaults(run=_openapi)

    _add_pipeline(commands)

    arguments = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("alembic.runtime.plugins").setLevel(logging.WARNING)
    arguments.run(arguments, Settings())


if __name__ == "__main__":
    main()
