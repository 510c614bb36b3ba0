"""The data pipeline on Spark: `hourglass pipeline import` and `hourglass pipeline report`.

This module imports no Spark, so the command line can describe the jobs without it.
"""

# Offers per call of the batch-offer code where the database has no bulk path: the
# HTTP API's batch limit.
BATCH_SIZE = 1000
FORMATS = ("parquet", "csv", "json")
