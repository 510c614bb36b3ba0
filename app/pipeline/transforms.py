"""The import's transforms.

    normalize (DataFrame) -> queue, key, payload (JSON text), scheduled_at (text),
                             priority (text), group (text), expires_at (text),
                             ttl (text), input_error
    co_locate (DataFrame) -> the rows of each key together, in one partition
    judge (rows, in Python) -> each row with its verdict: stored form, or a reason

`judge` runs on the executors in the same Python pass that writes (one pass
over columnar batches: a second one cost the import a third of its time), and
checks each row by app/pipeline/rows.py, the API's own rules.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from app.pipeline.rows import FIELDS, Checked, Reason, check_row, json_text

NORMALIZED = (
    "queue string, key string, payload string, scheduled_at string, priority string, "
    "`group` string, expires_at string, ttl string, input_error string"
)
# One normalized row, in NORMALIZED's order (every field text, or None).
Row = tuple[str | None, ...]
# A JSON line that is not a JSON object with these fields.
INVALID_LINE = "invalid_json_line"


def normalize(
    df: DataFrame, *, json_lines: bool, columns: dict[str, str], queue: str | None
) -> DataFrame:
    """The input's rows as the fields (FIELDS), all text; `columns` maps field to input
    column.

    JSON lines come as one `value` column of text (spark.read.text), so that any
    JSON value can be a payload; other formats hold JSON text in the payload
    column. A timestamp-typed `scheduled_at` or `expires_at` becomes RFC 3339 in UTC,
    and a numeric `ttl` its number's text. `queue` names the queue of every row of a
    file without a queue column.
    """
    if json_lines:
        return df.mapInArrow(_parse_lines(columns, queue), NORMALIZED)
    present = set(df.columns)
    # A column named on the command line must exist: a typo in --scheduled-at-column
    # must not quietly schedule every row for now.
    for name, column in columns.items():
        if column != name and column not in present and not (name == "queue" and queue):
            raise ValueError(f"the input has no column {column!r} (for {name})")
    # As the API refuses unknown fields, an input column no field takes is refused:
    # `scheduledAt` for `scheduled_at` must not quietly mean "now".
    used = {columns.get(name, name) for name in FIELDS}
    if unknown := sorted(present - used):
        raise ValueError(
            f"the input has columns no field takes: {unknown}; name them with "
            "--key-column, --payload-column, --scheduled-at-column, --priority-column, "
            "--group-column, --expires-at-column, --ttl-column or --queue-column, or leave "
            "them out of the input"
        )

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
        if name == "payload" and isinstance(data_type, T.StructType | T.MapType | T.ArrayType):
            # A nested payload column is its JSON, null fields included.
            return F.to_json(F.col(column), {"ignoreNullFields": "false"})
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
        if not isinstance(record, dict):
            raise TypeError("not a JSON object")
        if set(record) - set(names.values()):  # a field no column takes, as the API refuses
            return _rejected_line(line, Reason.UNKNOWN_FIELD)
        values = {
            "queue": queue if queue is not None else _text(record.get(names["queue"])),
            "key": _text(record.get(names["key"])),
            "payload": None,
            "scheduled_at": _text(record.get(names["scheduled_at"])),
            "priority": _number(record.get(names["priority"])),
            "group": None,
            "expires_at": _text(record.get(names["expires_at"])),
            "ttl": _number(record.get(names["ttl"])),
            "input_error": None,
        }
        group = record.get(names["group"])
        if isinstance(group, str) or group is None:
            values["group"] = group
        else:  # a number or an object is no group, as the API refuses it
            values["group"] = json_text(group)
            values["input_error"] = Reason.INVALID_GROUP
        if names["payload"] in record:
            try:
                values["payload"] = json_text(record[names["payload"]])
            except ValueError:  # NaN or Infinity, which Python's parser takes
                values["input_error"] = Reason.INVALID_PAYLOAD
        for value in values.values():
            if value is not None:
                value.encode()  # a lone surrogate ("\ud800") is no text Arrow can carry
    except (ValueError, TypeError):  # UnicodeError included; the line goes to the rejects
        return _rejected_line(line, INVALID_LINE)
    except RecursionError:
        # Nested deeper than Python's parser goes (~990 levels). Only a payload may hold
        # arrays and objects (the other fields are text), so it is one too deep to take.
        return _rejected_line(line, Reason.PAYLOAD_TOO_DEEP)
    return values


def _rejected_line(line: str, reason: str) -> dict[str, str | None]:
    """A line that goes to the rejects as it is (its text in the payload column)."""
    payload = line.encode(errors="replace").decode()
    return {name: None for name in FIELDS} | {"payload": payload, "input_error": reason}


def _text(value: object) -> str | None:
    """A field that must be text; anything else is kept as its JSON text, and fails later."""
    if value is None or isinstance(value, str):
        return value
    return json_text(value)


def _number(value: object) -> str | None:
    """A field that must be a JSON number, as its JSON text: a string ("5") is not one,
    as the API refuses it, so it is kept quoted, and fails later."""
    return None if value is None else json_text(value)


_NORMALIZED_ARROW = pa.schema([(name, pa.string()) for name in (*FIELDS, "input_error")])


def co_locate(df: DataFrame, partitions: int) -> DataFrame:
    """Every row of one (queue, key) in one partition, next to each other: duplicates
    can then be resolved while the rows stream by."""
    return df.repartition(partitions, "queue", "key").sortWithinPartitions("queue", "key")


def judge(
    rows: Iterable[Row], *, now_ms: int, max_payload_bytes: int
) -> Iterator[tuple[Row, Checked]]:
    """Each normalized row with its verdict, for rows that come grouped by (queue, key).

    A row is a tuple in NORMALIZED's order (queue, key, payload, scheduled_at,
    priority, group, expires_at, ttl, input_error): the executors zip Arrow's columns
    into them, the cheapest form. Of the valid rows of one key, the one due last wins,
    then the one with the greatest stored payload (bytes), then the highest priority,
    then the greatest group (by code point; none before any), then the latest expiry
    (none before any), so the choice does not depend on the input's order or
    partitioning; the others get reason `duplicate_key`. A winner is yielded once the
    rows of its key have ended.
    """
    current: tuple[str | None, str | None] | None = None
    best: tuple[Row, Checked] | None = None
    for row in rows:
        *fields, input_error = row
        if input_error is not None:
            yield row, Checked(input_error)
            continue
        checked = check_row(*fields, now_ms=now_ms, max_payload_bytes=max_payload_bytes)
        queue, key = fields[0], fields[1]
        if checked.reason is not None:
            yield row, checked
            continue
        if (queue, key) != current or best is None:
            if best is not None:
                yield best
            current, best = (queue, key), (row, checked)
            continue
        loser = (row, checked)
        if _rank(checked) > _rank(best[1]):
            loser, best = best, loser
        yield loser[0], Checked(Reason.DUPLICATE_KEY)
    if best is not None:
        yield best


def _rank(checked: Checked) -> tuple[int, bytes, int, str, bool, int]:
    # The group and the expiry last: two rows that differ only in them must not be settled
    # by their order.
    return (
        checked.scheduled_at or 0,
        checked.payload or b"",
        checked.priority,
        checked.group or "",
        checked.expires_at is not None,
        checked.expires_at or 0,
    )
