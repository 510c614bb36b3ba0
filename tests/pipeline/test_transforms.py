"""The import's transforms, each a DataFrame function, on a local Spark session."""

from __future__ import annotations

import datetime as dt

import pytest

from app.pipeline import transforms
from app.pipeline.rows import Reason

NOW = 1_795_683_600_000
LATER = "2026-11-27T09:00:00Z"


def _rows(df):
    return [row.asDict() for row in df.collect()]


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
            "priority": None,
            "group": None,
            "expires_at": None,
            "ttl": None,
            "input_error": None,
        }
    ]


def test_a_nested_payload_column_is_taken_as_its_json(spark):
    df = spark.createDataFrame(
        [("a", {"n": 1, "tags": ["x"], "none": None}, [1, 2], {"k": "v"})],
        "key string, payload struct<n: int, tags: array<string>, none: string>, list array<int>,"
        " map map<string, string>",
    )
    for column, expected in (
        ("payload", '{"n":1,"tags":["x"],"none":null}'),
        ("list", "[1,2]"),
        ("map", '{"k":"v"}'),
    ):
        normalized = transforms.normalize(
            df.select("key", column),
            json_lines=False,
            columns={"payload": column},
            queue="q",
        )
        assert _rows(normalized)[0]["payload"] == expected


def test_json_lines_take_any_json_value_as_payload(spark, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"queue": "q", "key": "a", "payload": {"deep": [1, {"x": null}]}}\n'
        '{"queue": "q", "key": "b", "payload": "text", "scheduled_at": "2026-11-27T09:00:00Z"}\n'
        "not json at all\n"
        '{"queue": "q", "key": "c", "payload": NaN}\n'
        '{"queue": "q", "key": NaN, "payload": 1}\n'
        '{"queue": "q", "key": "\\ud800", "payload": 1}\n'
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
        (None, '{"queue": "q", "key": NaN, "payload": 1}', transforms.INVALID_LINE),
        (None, '{"queue": "q", "key": "\\ud800", "payload": 1}', transforms.INVALID_LINE),
    ]


def _row(
    queue,
    key,
    payload,
    scheduled_at=None,
    error=None,
    priority=None,
    group=None,
    expires_at=None,
    ttl=None,
):
    return queue, key, payload, scheduled_at, priority, group, expires_at, ttl, error


def _judged(rows):
    return [
        (row[0], row[1], checked.payload, checked.scheduled_at, checked.reason)
        for row, checked in transforms.judge(rows, now_ms=NOW, max_payload_bytes=1000)
    ]


def test_judge_gives_the_stored_form_or_a_reason():
    rows = [
        _row("q", "a", '{ "n": 1 }', LATER),
        _row("q", "b", "nope", LATER),
        _row("bad q", "c", "1"),
        _row(None, None, "not json", error=transforms.INVALID_LINE),
    ]
    assert sorted(_judged(rows), key=str) == sorted(
        [
            ("q", "a", b'{"n":1}', NOW + 86_400_000, None),
            ("q", "b", None, None, Reason.INVALID_PAYLOAD),
            ("bad q", "c", None, None, Reason.INVALID_QUEUE),
            (None, None, None, None, transforms.INVALID_LINE),
        ],
        key=str,
    )


def test_of_duplicate_keys_the_latest_then_the_greatest_payload_wins():
    group = [
        _row("q", "k", '"early"', "2026-11-27T08:00:00Z"),
        _row("q", "k", '"late-a"', LATER),
        _row("q", "k", '"late-b"', LATER),
        _row("q", "k", "broken", "2026-11-28T09:00:00Z"),  # invalid: never the winner
    ]
    for order in (group, list(reversed(group)), group[2:] + group[:2]):
        judged = _judged([*order, _row("r", "k", '"own queue"')])
        winners = {(queue, payload) for queue, _, payload, _, reason in judged if reason is None}
        assert winners == {("q", b'"late-b"'), ("r", b'"own queue"')}
        reasons = sorted(reason for *_, reason in judged if reason is not None)
        assert reasons == [Reason.DUPLICATE_KEY, Reason.DUPLICATE_KEY, Reason.INVALID_PAYLOAD]


def test_co_locate_puts_each_key_in_one_partition_in_order(spark):
    rows = [("q", f"k{n % 7}", "1", None, None, None, None, None, None) for n in range(70)]
    df = spark.createDataFrame(rows, transforms.NORMALIZED)
    partitions = transforms.co_locate(df, 3).rdd.glom().collect()
    where = {}
    for index, partition in enumerate(partitions):
        keys = [row["key"] for row in partition]
        assert keys == sorted(keys)
        for key in keys:
            assert where.setdefault(key, index) == index
    assert len(where) == 7


def test_a_column_named_on_the_command_line_must_exist(spark):
    df = spark.createDataFrame(
        [("k", "1", "2026-11-27T09:00:00Z")], "key string, payload string, due string"
    )
    with pytest.raises(ValueError, match="scheduledAt"):
        transforms.normalize(
            df, json_lines=False, columns={"scheduled_at": "scheduledAt"}, queue="q"
        )


def test_a_column_no_field_takes_is_refused(spark):
    df = spark.createDataFrame(
        [("k", "1", "2026-11-27T09:00:00Z")], "key string, payload string, scheduledAt string"
    )
    with pytest.raises(ValueError, match="scheduledAt"):  # not quietly "now"
        transforms.normalize(df, json_lines=False, columns={}, queue="q")


def test_a_json_line_with_a_field_no_column_takes_is_rejected():
    names = {name: name for name in transforms.FIELDS}
    values = transforms._line_fields('{"key": "k", "payload": 1, "delay": 60}', names, "q")
    assert values["input_error"] == Reason.UNKNOWN_FIELD


def test_a_priority_column_is_taken_as_the_api_takes_priority(spark, tmp_path):
    df = spark.createDataFrame(
        [("a", "1", 7), ("b", "1", None)], "key string, payload string, priority int"
    )
    normalized = transforms.normalize(df, json_lines=False, columns={}, queue="q")
    assert [row["priority"] for row in _rows(normalized)] == ["7", None]
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"key": "a", "payload": 1, "priority": 9}\n'
        '{"key": "b", "payload": 1, "priority": "9"}\n'
        '{"key": "c", "payload": 1, "priority": 4.0}\n'
        '{"key": "d", "payload": 1}\n'
    )
    lines = transforms.normalize(spark.read.text(str(path)), json_lines=True, columns={}, queue="q")
    judged = _judged([tuple(row.values()) for row in _rows(lines)])
    assert sorted((key, reason) for _, key, _, _, reason in judged) == [
        ("a", None),
        ("b", Reason.INVALID_PRIORITY),  # a string, as the API refuses it
        ("c", None),
        ("d", None),
    ]
    priorities = {
        row[1]: checked.priority
        for row, checked in transforms.judge(
            [tuple(row.values()) for row in _rows(lines)], now_ms=NOW, max_payload_bytes=1000
        )
        if checked.reason is None
    }
    assert priorities == {"a": 9, "c": 4, "d": 0}


def test_a_group_column_is_taken_as_the_api_takes_group(spark, tmp_path):
    df = spark.createDataFrame(
        [("a", "1", "tenant-7"), ("b", "1", None), ("c", "1", "")],
        "key string, payload string, tenant string",
    )
    normalized = transforms.normalize(df, json_lines=False, columns={"group": "tenant"}, queue="q")
    assert [row["group"] for row in _rows(normalized)] == ["tenant-7", None, ""]
    # Under its own name (a word Spark's SQL reserves), by default.
    normalized = transforms.normalize(
        df.withColumnRenamed("tenant", "group"), json_lines=False, columns={}, queue="q"
    )
    assert [row["group"] for row in _rows(normalized.where("`group` IS NOT NULL"))] == [
        "tenant-7",
        "",
    ]
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"key": "a", "payload": 1, "group": "tenant-7"}\n'
        '{"key": "b", "payload": 1, "group": 7}\n'
        '{"key": "c", "payload": 1, "group": null}\n'
        '{"key": "d", "payload": 1, "group": ""}\n'
        '{"key": "e", "payload": 1, "group": "tab\\there"}\n'
        '{"key": "f", "payload": 1, "group": ["x"]}\n'
        '{"key": "g", "payload": 1}\n'
    )
    lines = transforms.normalize(spark.read.text(str(path)), json_lines=True, columns={}, queue="q")
    rows = [tuple(row.values()) for row in _rows(lines)]
    verdicts = {
        row[1]: (checked.reason, checked.group)
        for row, checked in transforms.judge(rows, now_ms=NOW, max_payload_bytes=1000)
    }
    assert verdicts == {
        "a": (None, "tenant-7"),
        "b": (Reason.INVALID_GROUP, None),  # a number, as the API refuses it
        "c": (None, None),
        "d": (None, None),  # empty is none, as an empty CSV field
        "e": (Reason.INVALID_GROUP, None),  # a control character
        "f": (Reason.INVALID_GROUP, None),
        "g": (None, None),
    }
    # A refused group goes to the rejects as it was read: its JSON text.
    assert {row[1]: row[5] for row in rows}["b"] == "7"


def test_of_duplicate_keys_that_differ_only_in_group_the_greatest_group_wins():
    rows = [
        _row("q", "k", "1", LATER, group="b"),
        _row("q", "k", "1", LATER),
        _row("q", "k", "1", LATER, group="a"),
    ]
    for order in (rows, list(reversed(rows)), rows[1:] + rows[:1]):
        judged = list(transforms.judge(order, now_ms=NOW, max_payload_bytes=1000))
        assert [checked.group for _, checked in judged if checked.reason is None] == ["b"]
        assert sorted(row[5] or "" for row, checked in judged if checked.reason) == ["", "a"]
    # A later time still wins over any group.
    rows.append(_row("q", "k", "1", "2026-11-28T09:00:00Z"))
    judged = list(transforms.judge(rows, now_ms=NOW, max_payload_bytes=1000))
    assert [row[5] for row, checked in judged if checked.reason is None] == [None]


def test_an_expiry_column_is_taken_as_the_api_takes_expires_at_or_ttl(spark, tmp_path):
    # Typed columns: a timestamp as its RFC 3339 text, a number as its text.
    df = spark.createDataFrame(
        [
            ("a", "1", dt.datetime(2026, 11, 27, 9, 0, 0, 250000, tzinfo=dt.UTC), None),
            ("b", "1", None, 1.5),
            ("c", "1", None, 1e-4),
            ("d", "1", None, None),
        ],
        "key string, payload string, ends timestamp, life double",
    )
    normalized = transforms.normalize(
        df, json_lines=False, columns={"expires_at": "ends", "ttl": "life"}, queue="q"
    )
    rows = [tuple(row.values()) for row in _rows(normalized)]
    assert [row[6:8] for row in rows] == [
        ("2026-11-27T09:00:00.250Z", None),
        (None, "1.5"),
        (None, "1.0E-4"),
        (None, None),
    ]
    verdicts = {
        row[1]: (checked.reason, checked.expires_at)
        for row, checked in transforms.judge(rows, now_ms=NOW, max_payload_bytes=1000)
    }
    assert verdicts == {
        "a": (None, NOW + 86_400_250),
        "b": (None, NOW + 1_500),
        "c": (Reason.INVALID_EXPIRY, None),  # under a millisecond, as the API refuses it
        "d": (None, None),
    }
    path = tmp_path / "in.jsonl"
    path.write_text(
        '{"key": "a", "payload": 1, "expires_at": "2026-11-27T09:00:00Z"}\n'
        '{"key": "b", "payload": 1, "ttl": 60, "scheduled_at": "2026-11-27T09:00:00Z"}\n'
        '{"key": "c", "payload": 1, "ttl": "60"}\n'
        '{"key": "d", "payload": 1, "expires_at": 1795770000000}\n'
        '{"key": "e", "payload": 1, "ttl": 0}\n'
        '{"key": "f", "payload": 1, "ttl": 60, "expires_at": "2026-11-27T09:00:00Z"}\n'
        '{"key": "g", "payload": 1, "ttl": null, "expires_at": "2026-11-27T09:00:00Z"}\n'
        '{"key": "h", "payload": 1, "ttl": 0.001}\n'
        '{"key": "i", "payload": 1, "expires_at": "2026-11-26T08:00:00Z"}\n'
    )
    lines = transforms.normalize(spark.read.text(str(path)), json_lines=True, columns={}, queue="q")
    rows = [tuple(row.values()) for row in _rows(lines)]
    verdicts = {
        row[1]: (checked.reason, checked.expires_at)
        for row, checked in transforms.judge(rows, now_ms=NOW, max_payload_bytes=1000)
    }
    assert verdicts == {
        "a": (None, NOW + 86_400_000),
        "b": (None, NOW + 86_400_000 + 60_000),  # after the row is due, not after now
        "c": (Reason.INVALID_EXPIRY, None),  # a string, as the API refuses it
        "d": (Reason.INVALID_EXPIRY, None),  # a number is no time
        "e": (Reason.INVALID_EXPIRY, None),
        "f": (Reason.INVALID_EXPIRY, None),  # both, as the API refuses them
        "g": (None, NOW + 86_400_000),  # a null is as if left out
        "h": (None, NOW + 1),
        "i": (None, NOW - 3_600_000),  # before it is due: taken, never delivered
    }
    # A refused ttl goes to the rejects as it was read: its JSON text.
    assert {row[1]: row[7] for row in rows}["c"] == '"60"'


def test_of_duplicate_keys_that_differ_only_in_expiry_the_latest_expiry_wins():
    rows = [
        _row("q", "k", "1", LATER, ttl="60"),
        _row("q", "k", "1", LATER),
        _row("q", "k", "1", LATER, expires_at="2026-11-27T09:00:30Z"),
    ]
    for order in (rows, list(reversed(rows)), rows[1:] + rows[:1]):
        judged = list(transforms.judge(order, now_ms=NOW, max_payload_bytes=1000))
        assert [checked.expires_at for _, checked in judged if checked.reason is None] == [
            NOW + 86_400_000 + 60_000
        ]
        assert sorted(
            (row[6] or "", row[7] or "") for row, checked in judged if checked.reason
        ) == [
            ("", ""),
            ("2026-11-27T09:00:30Z", ""),
        ]
