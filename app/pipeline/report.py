"""`hourglass pipeline report`: how well the queues keep time, read through Spark's JDBC source.

Reads `delivery_history` and `delayed_queue` in partitions by `id` range, and
writes into the output directory:
- `hourly/`: per queue and UTC hour (by when messages finished): finished,
  deliveries, redeliveries, acknowledgements, dead letters, dropped, expired, lateness
  and processing-time percentiles (Parquet);
- `forecast/`: messages coming due per queue and hour for the next days (Parquet);
- `summary.json`: the same per queue over the whole history, and what is ready now;
- `lateness.png` and `forecast.png`.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import time
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from sqlalchemy import func, select
from sqlalchemy.engine import make_url

from app.pipeline import reports
from app.storage.dialects import Bounds, for_engine_url
from app.storage.engine import create_unpooled_engine
from app.storage.tables import delayed_queue, delivery_history

# Rows per partition of a JDBC read, roughly.
ROWS_PER_PARTITION = 250_000
# What the summary and the lateness chart say over a history with no rows.
NO_HISTORY = "no messages finished in this window"


# Per server backend: the JDBC scheme, the driver class, what the URL ends with.
_JDBC = {
    "postgresql": ("postgresql", "org.postgresql.Driver", ""),
    # MariaDB's driver takes the jdbc:mysql: scheme when permitted, and with it Spark
    # quotes names with backticks (with jdbc:mariadb: it would use double quotes,
    # which MariaDB reads as strings).
    "mariadb": ("mysql", "org.mariadb.jdbc.Driver", "?permitMysqlScheme"),
    "mysql": ("mysql", "org.mariadb.jdbc.Driver", "?permitMysqlScheme"),
}
# Per server backend: the property that sets the session's settings as the driver
# connects, what separates them, and the form of one.
_JDBC_SESSION = {
    "postgresql": ("options", " ", "-c {name}={value}"),  # libpq's form, as server_options
    "mariadb": ("sessionVariables", ",", "{name}={value}"),
    "mysql": ("sessionVariables", ",", "{name}={value}"),
}


def jdbc_source(database_url: str, bounds: Bounds | None = None) -> tuple[str, dict[str, str]]:
    """The JDBC URL and connection properties for a SQLAlchemy database URL, its sessions
    bounded within `bounds` as the service's are, but for a statement's time (read_table)."""
    url = make_url(database_url)
    backend = url.get_backend_name()
    if backend == "sqlite":
        return f"jdbc:sqlite:{url.database}", {"driver": "org.sqlite.JDBC"}
    if backend not in _JDBC:
        raise ValueError(f"no JDBC source for {backend} URLs")
    scheme, driver, ending = _JDBC[backend]
    host = url.host or "localhost"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    port = f":{url.port}" if url.port else ""
    # fetchsize: stream each partition through a cursor instead of holding it whole.
    properties = {"driver": driver, "fetchsize": "10000"}
    if url.username:
        properties["user"] = url.username
    if url.password:
        properties["password"] = url.password
    if backend == "postgresql":
        # Connection parameters of the URL (sslmode, sslrootcert, …): pgJDBC takes
        # libpq's names for these, and ignores those it does not know. (mysqlclient's
        # names are not MariaDB Connector/J's: pass those with --conf or in --jars.)
        for name, value in url.query.items():
            if name not in properties:
                properties[name] = value if isinstance(value, str) else value[-1]
    # The sessions' bounds (Dialect.session_settings): an idle transaction's, not a
    # statement's (read_table says why). On PostgreSQL each partition is read in one
    # transaction (pgJDBC streams rows by `fetchsize` only inside one, and Spark opens it
    # so), holding back vacuum while it lasts: ~2.5 s for 150,000 rows on a busy 2-core
    # machine, idle at most ~0.35 s between fetches, well within the idle bound.
    settings = for_engine_url(database_url, bounds).session_settings(statements=False)
    name, separator, form = _JDBC_SESSION[backend]
    given = [properties[name]] if name in properties else []  # the URL's own, kept
    properties[name] = separator.join(
        [*given, *(form.format(name=setting, value=value) for setting, value in settings.items())]
    )
    return f"jdbc:{scheme}://{host}{port}/{url.database}{ending}", properties


def read_table(
    spark: SparkSession,
    database_url: str,
    table,
    columns: dict[str, str],
    bounds: Bounds | None = None,
) -> DataFrame:
    """`columns` of `table` (name: Spark type), read in partitions by id range (the
    bounds asked of the database). The types are set here: SQLite's driver reads
    BIGINT as a decimal.

    Its sessions bound an idle transaction as the service's do (within `bounds`), and
    not a statement's time: the count reads a whole table (~0.25 s a million rows on
    PostgreSQL, decision 12), past the service's statement bound on a large history, and
    a partition's read streams up to ROWS_PER_PARTITION rows to Spark."""
    engine = create_unpooled_engine(database_url, statements=False, bounds=bounds)
    try:
        with engine.connect() as connection:
            low, high, count = connection.execute(
                select(func.min(table.c.id), func.max(table.c.id), func.count())
            ).one()
    finally:
        engine.dispose()
    jdbc_url, properties = jdbc_source(database_url, bounds)
    quote = engine.dialect.identifier_preparer.quote_identifier  # "x", or `x` on MariaDB
    names = ", ".join(quote(column) for column in columns)
    query = f"(SELECT {names} FROM {quote(table.name)}) AS {quote(table.name)}"
    if not count:
        read = spark.read.jdbc(jdbc_url, query, properties=properties)
    else:
        read = spark.read.jdbc(
            jdbc_url,
            query,
            column="id",
            lowerBound=low,
            upperBound=high + 1,
            numPartitions=max(1, min(64, math.ceil(count / ROWS_PER_PARTITION))),
            properties=properties,
        )
    return read.select(*(F.col(name).cast(kind).alias(name) for name, kind in columns.items()))


def run_report(
    spark: SparkSession,
    *,
    database_url: str,
    output: str,
    now_ms: int,
    days: int,
    bounds: Bounds | None = None,
) -> dict[str, Any]:
    """Write the datasets, the summary and the charts; the summary. The database's
    sessions are bounded within `bounds` (read_table)."""
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    history = read_table(
        spark,
        database_url,
        delivery_history,
        {
            "id": "long",
            "queue": "string",
            "key": "string",
            "scheduledAt": "long",
            "createdAt": "long",
            "firstDeliveredAt": "long",
            "lastDeliveredAt": "long",
            "deliveries": "int",
            "outcome": "string",
            "finishedAt": "long",
        },
        bounds,
    ).persist()
    live = read_table(
        spark,
        database_url,
        delayed_queue,
        {"id": "long", "pKind": "string", "scheduledAt": "long", "lockUuid": "string"},
        bounds,
    ).persist()
    try:
        hourly = reports.hourly(history)
        hourly.write.mode("overwrite").parquet(str(out / "hourly"))
        coming = reports.forecast(live, now_ms=now_ms, days=days)
        coming.write.mode("overwrite").parquet(str(out / "forecast"))
        summary = _summary(history, live, coming, now_ms=now_ms, days=days)
        overall = reports.history_stats(history, "hour")
        _charts(out, overall.collect(), coming.collect(), days=days)
    finally:
        history.unpersist()
        live.unpersist()
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _summary(history: DataFrame, live: DataFrame, coming: DataFrame, *, now_ms: int, days: int):
    per_queue = {
        row["queue"]: _plain(row) for row in reports.history_stats(history, "queue").collect()
    }
    ready = {row["queue"]: _plain(row) for row in reports.ready_now(live, now_ms=now_ms).collect()}
    due = {
        row["queue"]: row["coming_due"]
        for row in coming.groupBy("queue").agg(F.sum("coming_due").alias("coming_due")).collect()
    }
    totals = reports.history_stats(history.withColumn("all", F.lit(True)), "all").collect()
    queues = sorted(set(per_queue) | set(ready) | set(due))
    # One row always (nulls for an empty history).
    first_finished, last_finished = history.agg(F.min("finishedAt"), F.max("finishedAt")).collect()[
        0
    ]
    rows = history.count()
    return {
        "generated_at": _iso(now_ms),
        "forecast_days": days,
        "history": {
            "rows": rows,
            "from": _iso(first_finished),
            "to": _iso(last_finished),
            "all_queues": _plain(totals[0]) if totals else None,
            # Said in words, so an empty report is not read as a broken one.
            "note": None if rows else NO_HISTORY,
        },
        "queues": {
            queue: {
                "finished": per_queue.get(queue),
                "ready_now": ready.get(queue, {}).get("ready", 0),
                "oldest_ready_s": ready.get(queue, {}).get("oldest_ready_s"),
                "coming_due": due.get(queue, 0),
            }
            for queue in queues
        },
    }


def _plain(row) -> dict[str, Any]:
    return {name: value for name, value in row.asDict().items() if name not in ("queue", "all")}


def _iso(epoch_ms: int | None) -> str | None:
    if epoch_ms is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_ms / 1000))


def _charts(out: Path, hourly_rows: list, forecast_rows: list, *, days: int) -> None:
    charts = {
        "lateness.png": lateness_chart(hourly_rows),
        "forecast.png": forecast_chart(forecast_rows, days=days),
    }
    from matplotlib import pyplot  # after _figure chose the backend

    for name, figure in charts.items():
        figure.savefig(out / name, dpi=100)
        pyplot.close(figure)


def lateness_chart(hourly_rows: list):
    """Lateness p50/p95/p99 per hour, all queues; the words NO_HISTORY when none finished."""
    figure, axes = _figure()
    axes.set_title("Lateness: first delivery minus the time asked for, all queues")
    if not hourly_rows:
        _empty(axes, NO_HISTORY)
        figure.tight_layout()
        return figure
    hours = [row["hour"] for row in hourly_rows]
    for fraction in reports.PERCENTILES:
        name = f"lateness_p{round(fraction * 100)}_s"
        axes.plot(hours, [row[name] for row in hourly_rows], marker="o", label=name.split("_")[1])
    axes.set_xlabel("hour the messages finished (UTC)")
    axes.set_ylabel("seconds")
    highest = max(
        (
            row[f"lateness_p{round(fraction * 100)}_s"] or 0
            for row in hourly_rows
            for fraction in reports.PERCENTILES
        ),
        default=0,
    )
    axes.set_ylim(0, highest * 1.15 or 1)
    axes.grid(True, alpha=0.3)
    axes.legend()
    _hour_axis(axes, hours)
    figure.tight_layout()
    return figure


def forecast_chart(forecast_rows: list, *, days: int):
    """Messages coming due per hour, all queues; words instead when none are."""
    figure, axes = _figure()
    axes.set_title("Messages coming due per hour, all queues")
    if not forecast_rows:
        _empty(axes, f"no messages coming due in the next {days} days")
        figure.tight_layout()
        return figure
    totals: dict[Any, int] = {}
    for row in forecast_rows:
        totals[row["hour"]] = totals.get(row["hour"], 0) + row["coming_due"]
    axes.bar(list(totals), list(totals.values()), width=1 / 24, align="edge")
    axes.set_xlabel("hour (UTC)")
    axes.set_ylabel("messages")
    axes.grid(True, axis="y", alpha=0.3)
    _hour_axis(axes, list(totals))
    figure.tight_layout()
    return figure


def _figure():
    import matplotlib

    matplotlib.use("Agg")  # files, no display
    from matplotlib import pyplot

    return pyplot.subplots(figsize=(10, 4.5))


def _empty(axes, words: str) -> None:
    """A chart with nothing to draw says so, with no axes: an empty time axis would
    start in 1970."""
    axes.set_axis_off()
    axes.text(0.5, 0.5, words, transform=axes.transAxes, ha="center", va="center", fontsize=16)


def _hour_axis(axes, hours: list) -> None:
    """Hours on the x axis, from an hour before the first to an hour after the last:
    a single hour must not stretch the axis over years."""
    from matplotlib import dates

    if hours:
        axes.set_xlim(min(hours) - dt.timedelta(hours=1), max(hours) + dt.timedelta(hours=2))
    locator = dates.AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(dates.ConciseDateFormatter(locator))


def main_report(arguments, settings) -> None:
    """The command line's `pipeline report`."""
    from app.config import normalize_database_url
    from app.pipeline.spark import spark_session
    from app.storage.engine import bounds_of

    database_url = (
        normalize_database_url(arguments.database_url)
        if arguments.database_url
        else settings.database_url
    )
    _check_schema(database_url)
    spark = spark_session("hourglass report", master=arguments.master, jars=arguments.jars)
    try:
        summary = run_report(
            spark,
            database_url=database_url,
            output=arguments.output,
            now_ms=time.time_ns() // 1_000_000,
            days=arguments.days,
            bounds=bounds_of(settings),
        )
    finally:
        spark.stop()
    print(json.dumps(summary, indent=2, default=str))
    print(f"report: {arguments.output}")


def _check_schema(database_url: str) -> None:
    """Stop with a sentence, before Spark starts, when the tables are not there to read."""
    from app.config import Settings
    from app.storage.blocking import create_blocking_storage
    from app.storage.schema import head_revision
    from app.storage.startup import DatabaseRefused

    store = create_blocking_storage(
        Settings(database_url=database_url, pool_size=1, auto_migrate=False)
    )
    try:
        revision = store.schema_revision()
    finally:
        store.close()
    if revision != head_revision():
        raise DatabaseRefused(  # exit code 4 (app/__main__.py)
            f"the database's schema is at {revision or 'nothing'}, this release reads "
            f"{head_revision()}: run `hourglass migrate` (or the service) first"
        )
