"""A local Spark session shared by the pipeline tests (starting one takes seconds)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from app.pipeline.spark import spark_session


@pytest.fixture(scope="session")
def spark(java: None) -> Iterator[SparkSession]:
    session = spark_session("hourglass tests", master="local[2]")
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
