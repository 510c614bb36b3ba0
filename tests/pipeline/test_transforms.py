"""The import's transforms, each a DataFrame function, on a local Spark session."""

from __future__ import annotations

import datetime as dt

from app.pipeline import transforms
from app.pipeline.rows import Reason

NOW = 1_795_683_600_000
LATER = "2026-11-27T09:00:00Z"


def _rows(df):
    return [row.asDict() for row in df.collect()]


def _checked(spark, rows, **normalize):
    df = spark.createDataFrame(
        rows, "queue string, key string, payload string, scheduled_at string"
    )
    normalized = transforms.normalize(df, json_lines=False, columns={}, queue=None, **normalize)
    return transforms.validate(normalized, now_ms=NOW, max_payload_bytes=1000)


def test_normalize_maps_columns_and_fills_in_the_queue(spark):
    df = spark.createDataFrame(
        [("u1", '{"a": 1}', dt.datetime(2026, 11, 27, 9, 0, 0, 250000, tzinfo=dt.UTC))],
        "user string, body string, due timestamp",
    )
    normalized = transforms.normalize(
        df,
        json_lines=False,
        columns={"key": "user", "payload": "body", "scheduled_at": "due"},
        queue="reminders",
    )
    assert _rows(normalized) == [
        {
            "queue": "reminders",
            "key": "u1",
            "payload": '{"a": 1}',
            "scheduled_at": "2026-11-27T09:00:00.250Z",
            "input_error": None,
        }
    ]


def test_json_lines_take_any_json_value_as_payload(spark, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"queue": "q", "key": "a", "payload": {"deep": [1, {"x": null}]}}\n'
        '{"queue": "q", "key": "b", "payload": "text", "scheduled_at": "2026-11-27T09:00:00Z"}\n'
        "not json at all\n"
        '{"queue": "q", "key": "c", "payload": NaN}\n'
    )
    normalized = transforms.normalize(
        spark.read.text(str(path)), json_lines=True, columns={}, queue=None
    )
    rows = _rows(normalized)
    assert [(row["key"], row["payload"], row["input_error"]) for row in rows] == [
        ("a", '{"deep":[1,{"x":null}]}', None),
        ("b", '"text"', None),
        (None, "not json at all", transforms.INVALID_LINE),
        ("c", None, Reason.INVALID_PAYLOAD),
    ]


def test_validate_gives_the_stored_form_or_a_reason(spark):
    checked = _rows(
        _checked(
            spark,
            [("q", "a", '{ "n": 1 }', LATER), ("q", "b", "nope", LATER), ("bad q", "c", "1", None)],
        )
    )
    assert [
        (row["key"], row["stored_payload"], row["scheduled_ms"], row["reason"]) for row in checked
    ] == [
        ("a", b'{"n":1}', NOW + 86_400_000, None),
        ("b", None, None, Reason.INVALID_PAYLOAD),
        ("c", None, None, Reason.INVALID_QUEUE),
    ]


def test_of_duplicate_keys_the_latest_then_the_greatest_payload_wins(spark):
    rows = [
        ("q", "k", '"early"', "2026-11-27T08:00:00Z"),
        ("q", "k", '"late-a"', LATER),
        ("q", "k", '"late-b"', LATER),
        ("q", "k", "broken", "2026-11-28T09:00:00Z"),  # invalid: never the winner
        ("other", "k", '"own queue"', None),
    ]
    for order in (rows, list(reversed(rows))):  # the input's order does not matter
        resolved = transforms.resolve_duplicates(_checked(spark, order))
        valid = {
            (row["queue"], row["stored_payload"]) for row in _rows(transforms.valid_rows(resolved))
        }
        assert valid == {("q", b'"late-b"'), ("other", b'"own queue"')}
        reasons = sorted(row["reason"] for row in _rows(transforms.rejected_rows(resolved)))
        assert reasons == [Reason.DUPLICATE_KEY, Reason.DUPLICATE_KEY, Reason.INVALID_PAYLOAD]
