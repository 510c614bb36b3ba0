"""The import's transforms: pure functions from DataFrame to DataFrame.

    normalize  -> queue, key, payload (JSON text), scheduled_at (text), input_error
    validate   -> + stored_payload, scheduled_ms, reason (null for a valid row)
    resolve_duplicates -> reason `duplicate_key` for every valid row but one per key
    valid_rows / rejected_rows -> what is written, and the rejects dataset

Each row is checked by app/pipeline/rows.py, the API's own rules, on the
executors (mapInArrow: one Python pass over columnar batches).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F
from pyspark.sql import types as T

from app.pipeline.rows import Reason, check_row, json_text

FIELDS = ("queue", "key", "payload", "scheduled_at")
NORMALIZED = "queue string, key string, payload string, scheduled_at string, input_error string"
VALIDATED = NORMALIZED + ", stored_payload binary, scheduled_ms long, reason string"
# A JSON line that is not a JSON object with these fields.
INVALID_LINE = "invalid_json_line"


def normalize(
    df: DataFrame, *, json_lines: bool, columns: dict[str, str], queue: str | None
) -> DataFrame:
    """The input's rows as the four fields, all text; `columns` maps field to input column.

    JSON lines come as one `value` column of text (spark.read.text), so that any
    JSON value can be a payload; other formats hold JSON text in the payload
    column. A timestamp-typed `scheduled_at` becomes RFC 3339 in UTC. `queue`
    names the queue of every row of a file without a queue column.
    """
    if json_lines:
        return df.mapInArrow(_parse_lines(columns, queue), NORMALIZED)
    present = set(df.columns)

    def field(name: str) -> Column:
        column = columns.get(name, name)
        if name == "queue" and queue is not None:
            return F.lit(queue)
        if column not in present:
            return F.lit(None).cast("string")
        data_type = df.schema[column].dataType
        if isinstance(data_type, T.TimestampType | T.TimestampNTZType):
            return F.date_format(F.col(column), "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")
        if isinstance(data_type, T.BinaryType):
            return F.decode(F.col(column), "UTF-8")
        return F.col(column).cast("string")

    return df.select(
        *(field(name).alias(name) for name in FIELDS),
        F.lit(None).cast("string").alias("input_error"),
    )


def _parse_lines(columns: dict[str, str], queue: str | None):
    names = {name: columns.get(name, name) for name in FIELDS}

    def parse(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            out: dict[str, list] = {name: [] for name in (*FIELDS, "input_error")}
            for line in batch.column(0).to_pylist():
                values = _line_fields(line, names, queue)
                for name, value in values.items():
                    out[name].append(value)
            yield pa.RecordBatch.from_pydict(out, schema=_NORMALIZED_ARROW)

    return parse


def _line_fields(line: str, names: dict[str, str], queue: str | None) -> dict[str, str | None]:
    try:
        record = json.loads(line)
    except ValueError:
        record = None
    if not isinstance(record, dict):  # kept whole in the rejects, as the payload
        return {name: None for name in FIELDS} | {"payload": line, "input_error": INVALID_LINE}
    values = {
        "queue": queue if queue is not None else _text(record.get(names["queue"])),
        "key": _text(record.get(names["key"])),
        "payload": None,
        "scheduled_at": _text(record.get(names["scheduled_at"])),
        "input_error": None,
    }
    if names["payload"] in record:
        try:
            values["payload"] = json_text(record[names["payload"]])
        except ValueError:  # NaN or Infinity, which Python's parser takes
            values["input_error"] = Reason.INVALID_PAYLOAD
    return values


def _text(value: object) -> str | None:
    """A field that must be text; anything else is kept as its JSON text, and fails later."""
    if value is None or isinstance(value, str):
        return value
    return json_text(value)


def validate(df: DataFrame, *, now_ms: int, max_payload_bytes: int) -> DataFrame:
    """Adds the stored payload, the due time (epoch ms) and the reason a row is refused."""

    def check(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            data = batch.to_pydict()
            stored, due, reasons = [], [], []
            for queue, key, payload, scheduled_at, error in zip(
                data["queue"],
                data["key"],
                data["payload"],
                data["scheduled_at"],
                data["input_error"],
                strict=True,
            ):
                if error is not None:
                    stored.append(None)
                    due.append(None)
                    reasons.append(error)
                    continue
                checked = check_row(
                    queue,
                    key,
                    payload,
                    scheduled_at,
                    now_ms=now_ms,
                    max_payload_bytes=max_payload_bytes,
                )
                stored.append(checked.payload)
                due.append(checked.scheduled_at)
                reasons.append(checked.reason)
            yield pa.RecordBatch.from_pydict(
                data | {"stored_payload": stored, "scheduled_ms": due, "reason": reasons},
                schema=_VALIDATED_ARROW,
            )

    return df.mapInArrow(check, VALIDATED)


_NORMALIZED_ARROW = pa.schema([(name, pa.string()) for name in (*FIELDS, "input_error")])
_VALIDATED_ARROW = pa.schema(
    list(_NORMALIZED_ARROW)
    + [("stored_payload", pa.binary()), ("scheduled_ms", pa.int64()), ("reason", pa.string())]
)


def resolve_duplicates(df: DataFrame) -> DataFrame:
    """One valid row per (queue, key): the one due last, then the one with the greatest
    stored payload (bytes), so the choice does not depend on the input's order or
    partitioning. The others get reason `duplicate_key`."""
    ranking = Window.partitionBy("queue", "key").orderBy(
        F.col("reason").isNull().desc(),
        F.col("scheduled_ms").desc(),
        F.col("stored_payload").desc(),
    )
    rank = F.row_number().over(ranking)
    return df.withColumn(
        "reason",
        F.when(F.col("reason").isNull() & (rank > 1), F.lit(Reason.DUPLICATE_KEY)).otherwise(
            F.col("reason")
        ),
    )


def valid_rows(df: DataFrame) -> DataFrame:
    return df.where(F.col("reason").isNull()).select(
        "queue", "key", "stored_payload", "scheduled_ms"
    )


def rejected_rows(df: DataFrame) -> DataFrame:
    return df.where(F.col("reason").isNotNull()).select(*FIELDS, "reason")
