"""The data pipeline on Spark: `hourglass pipeline import` and `hourglass pipeline report`.

This module imports no Spark, so the command line can describe the jobs without it.
"""

# Offers per call of the batch-offer code where the database has no bulk path: the
# HTTP API's batch limit.
BATCH_SIZE = 1000
FORMATS = ("parquet", "csv", "json")
# The application_name of the import's sessions on PostgreSQL, unless its database URL
# names one: pg_stat_activity then tells them from the service's, and a test can wait
# for a killed import's sessions to end without counting anyone else's.
IMPORT_APPLICATION_NAME = "hourglass-import"
