"""The Spark session the jobs run in: local by default, any master on request."""

from __future__ import annotations

import os
from pathlib import Path

from pyspark import SparkConf
from pyspark.sql import SparkSession

# JDBC drivers from Debian's libpostgresql-jdbc-java and libxerial-sqlite-jdbc-java;
# elsewhere pass --jars (or spark.jars.packages).
DEBIAN_JARS = ("/usr/share/java/postgresql.jar", "/usr/share/java/sqlite-jdbc.jar")


def spark_session(
    app_name: str, *, master: str | None = None, jars: list[str] = ()
) -> SparkSession:
    """A session for a job. Under spark-submit the master it set stays; otherwise
    `master`, or local Spark on every core."""
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not SparkConf().contains("spark.master"):
        builder = builder.master("local[*]")
    found = [jar for jar in (*jars, *DEBIAN_JARS) if Path(jar).exists()]
    if found:
        builder = builder.config("spark.jars", ",".join(found))
    builder = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")  # the jobs print their own progress
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # The executors' Python is this one, so they import this package.
        .config("spark.pyspark.python", os.environ.get("PYSPARK_PYTHON", _python()))
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session


def _python() -> str:
    import sys

    return sys.executable
