"""The Spark session the jobs run in: local by default, any master on request."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import SparkSession

# JDBC drivers from Debian's libpostgresql-jdbc-java, libmariadb-java and
# libxerial-sqlite-jdbc-java; elsewhere pass --jars (or spark.jars.packages).
DEBIAN_JARS = (
    "/usr/share/java/postgresql.jar",
    "/usr/share/java/mariadb-java-client.jar",
    "/usr/share/java/sqlite-jdbc.jar",
)


def spark_session(
    app_name: str, *, master: str | None = None, jars: Sequence[str] = ()
) -> SparkSession:
    """A session for a job. Under spark-submit the master it set stays; otherwise
    `master`, or local Spark on every core."""
    builder = SparkSession.builder.appName(app_name)
    # Under spark-submit the JVM is up already, with the master, jars and Python it
    # was given: leave those alone.
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if master:
        builder = builder.master(master)
    elif not submitted:
        builder = builder.master("local[*]")
    if not submitted:
        # Local files that exist; URLs (hdfs://, https://) as given.
        found = [jar for jar in (*jars, *DEBIAN_JARS) if "://" in jar or Path(jar).exists()]
        if found:
            builder = builder.config("spark.jars", ",".join(found))
        if (master or "local").startswith("local"):
            # Short jobs in one JVM: the C2 compiler's warm-up took a whole core for
            # seconds of a 1,000,000-row import (4.9 s of CPU in a 20 s import; with C1
            # alone the first job's JVM CPU fell from 15.0 to 9.8 s, bench/ARCHIVE.md);
            # C1's code is fast enough for the little the JVM does here.
            builder = builder.config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1")
        # The Python workers run this interpreter, which has this package, unless
        # PYSPARK_PYTHON names another. PySpark takes the workers' Python from that
        # variable alone (SparkContext.pythonExec, default `python3` on the PATH, which
        # may not have the package); spark.pyspark.python is read by spark-submit's
        # launcher only. So the variable is set, before the JVM starts: it inherits it
        # for the Python it starts itself. Executors on other machines need a Python
        # at the same path, or PYSPARK_PYTHON naming theirs (docs/pipeline.md).
        python = os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        builder = builder.config("spark.pyspark.python", python)
    builder = (
        builder.config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.showConsoleProgress", "false")  # the jobs print their own progress
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
    )
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("WARN")
    return session
