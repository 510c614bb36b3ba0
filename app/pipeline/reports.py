"""The report's transforms: pure functions from the history and the live table.

Times in the database are epoch milliseconds; the report's hours are UTC
timestamps, and its durations seconds.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

HOUR_MS = 3_600_000
PERCENTILES = (0.5, 0.95, 0.99)


def _hour(epoch_ms: Column) -> Column:
    """The UTC hour an instant falls in, without a zone (the session's is UTC), so it
    reads the same in Python whatever the machine's local time."""
    return F.timestamp_millis(F.floor(epoch_ms / HOUR_MS) * HOUR_MS).cast("timestamp_ntz")


def _seconds(milliseconds: Column) -> Column:
    return milliseconds / F.lit(1000.0)


def _percentiles(name: str, seconds: Column) -> list[Column]:
    values = F.percentile(seconds, list(PERCENTILES))
    return [
        values[index].alias(f"{name}_p{round(fraction * 100)}_s")
        for index, fraction in enumerate(PERCENTILES)
    ]


def history_stats(history: DataFrame, *groups: str) -> DataFrame:
    """Per group (for instance queue and hour): what finished, and how late and how long.

    - `deliveries`: every delivery of the messages that finished; `redeliveries`:
      those beyond each message's first;
    - `acknowledgements`, `dead_letters`, `dropped`, `expired`: messages that finished so;
    - `lateness`: first delivery minus the time the producer asked for;
    - `processing`: acknowledgement minus last delivery, of acknowledged messages.
    """
    outcome = F.col("outcome")
    lateness = F.when(
        F.col("firstDeliveredAt").isNotNull(),
        _seconds(F.col("firstDeliveredAt") - F.col("scheduledAt")),
    )
    processing = F.when(
        (outcome == "acknowledged") & F.col("lastDeliveredAt").isNotNull(),
        _seconds(F.col("finishedAt") - F.col("lastDeliveredAt")),
    )
    return (
        history.withColumn("hour", _hour(F.col("finishedAt")))
        .groupBy(*groups)
        .agg(
            F.count(F.lit(1)).alias("finished"),
            F.sum("deliveries").alias("deliveries"),
            F.sum(F.greatest(F.col("deliveries") - 1, F.lit(0))).alias("redeliveries"),
            F.count(F.when(outcome == "acknowledged", 1)).alias("acknowledgements"),
            F.count(F.when(outcome == "dead_lettered", 1)).alias("dead_letters"),
            F.count(F.when(outcome == "dropped", 1)).alias("dropped"),
            F.count(F.when(outcome == "expired", 1)).alias("expired"),
            *_percentiles("lateness", lateness),
            *_percentiles("processing", processing),
        )
        .orderBy(*groups)
    )


def hourly(history: DataFrame) -> DataFrame:
    """history_stats per queue and UTC hour in which the messages finished."""
    return history_stats(history, "queue", "hour")


def forecast(live: DataFrame, *, now_ms: int, days: int) -> DataFrame:
    """Messages coming due per queue and hour, from now for `days` days: those waiting
    for their time (a leased message's time is its lease's end, so it is left out)."""
    until = now_ms + days * 24 * HOUR_MS
    waiting = live.where(
        F.col("lockUuid").isNull()
        & (F.col("scheduledAt") > F.lit(now_ms))
        & (F.col("scheduledAt") <= F.lit(until))
    )
    return (
        waiting.groupBy(F.col("pKind").alias("queue"), _hour(F.col("scheduledAt")).alias("hour"))
        .agg(F.count(F.lit(1)).alias("coming_due"))
        .orderBy("queue", "hour")
    )


def ready_now(live: DataFrame, *, now_ms: int) -> DataFrame:
    """Per queue, messages due and not leased now (an ended lease counts), and how
    long the oldest has waited."""
    due = live.where(F.col("scheduledAt") <= F.lit(now_ms))
    return due.groupBy(F.col("pKind").alias("queue")).agg(
        F.count(F.lit(1)).alias("ready"),
        _seconds(F.lit(now_ms) - F.min("scheduledAt")).alias("oldest_ready_s"),
    )
