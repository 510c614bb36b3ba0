"""The import's vectorised check (app/pipeline/batches.py) against the per-row check it
replaces on the executors (app/pipeline/rows.py's check_row, the API's rules): the same
reason for every row, and the same stored form for every valid one."""

from __future__ import annotations

import json

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.formats import KEY_PATTERN, QUEUE_PATTERN
from app.pipeline import transforms
from app.pipeline.batches import KeyGroups, check_batch
from app.pipeline.rows import Reason, check_row

NOW = 1_795_683_600_000
MAX_PAYLOAD_BYTES = 64
_NAMES = (
    "queue",
    "key",
    "payload",
    "scheduled_at",
    "priority",
    "group",
    "expires_at",
    "ttl",
    "input_error",
)
_SCHEMA = pa.schema([(name, pa.string()) for name in _NAMES])

_queues = st.one_of(
    st.none(),
    st.just(""),
    st.from_regex(QUEUE_PATTERN, fullmatch=True),
    st.sampled_from(["a" * 100, "a" * 101, "a b", "-a", "é", "q\n"]),
    st.text(max_size=4),
)
_keys = st.one_of(
    st.none(),
    st.just(""),
    st.from_regex(KEY_PATTERN, fullmatch=True),
    st.sampled_from(["é" * 200, "é" * 201, "k\x7f", "k\x85", "k\xa0", "k\n", "😀" * 200]),
    st.text(max_size=6),
)
_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)
# Payload texts around the edges of what the API takes, and of the stored-as-is path.
_PAYLOAD_EDGES = [
    "",
    "NaN",
    "-Infinity",
    '"\\ud800"',
    '{"a":1,"a":2}',
    '{"a":1,"b":2,"a":3}',
    '{"":1,"":2}',
    '{"a":":"}',
    '{"a":"x:y","b":":","c":"\\":"}',
    '["x",":"]',
    '{"a":1, "b":2}',
    '{"a":[1]}',
    "-0",
    "[-0]",
    '"\x7f\x85\u2028"',
    '"tab\there"',
    '"tab\\there"',
    '{"a":"b\\"c","a":":"}',
    '{":":1,":":2}',
    "1234567890123456",
    "12345678901234567",
    "-1234567890123456",
    "true",
    "nul",
    "[1,]",
    "{}",
    "[]",
    "[" * 100 + "]" * 100,
    "[" * 101 + "]" * 101,
    '["' + "[" * 200 + '"]',
    "[" * 5000,
    '"' + "x" * (MAX_PAYLOAD_BYTES - 2) + '"',
    '"' + "x" * (MAX_PAYLOAD_BYTES - 1) + '"',
    '"' + "é" * 31 + '"',
    '"' + "é" * 32 + '"',
    " 1 ",
    "1e400",
    "01",
    "1" * 5000,
]
_payloads = st.one_of(
    st.none(),
    st.builds(
        json.dumps,
        _json_values,
        ensure_ascii=st.booleans(),
        separators=st.sampled_from([(",", ":"), (", ", ": ")]),
    ),
    st.sampled_from(_PAYLOAD_EDGES),
    st.text(max_size=8),
)


@st.composite
def _times(draw) -> str:
    """RFC 3339-like texts around every edge of the accepted forms."""
    year = draw(st.sampled_from([0, 1, 2, 1900, 1969, 1970, 2000, 2024, 2026, 2100, 9998, 9999]))
    month = draw(st.one_of(st.just(2), st.integers(0, 13)))
    day = draw(st.one_of(st.integers(28, 31), st.integers(0, 32)))
    hour, minute, second = (
        draw(st.integers(0, 24)),
        draw(st.integers(0, 60)),
        draw(st.integers(0, 60)),
    )
    separator = draw(st.sampled_from(["T", "T", "t", " "]))
    fraction = draw(st.sampled_from(["", ".", ".5", ".123", ".1239", ".9995", ".123456789"]))
    zone = draw(
        st.sampled_from(["Z", "z", "", "+00:00", "-00:00", "+23:59", "-23:59", "+24:00", "+05:30"])
    )
    return (
        f"{year:04d}-{month:02d}-{day:02d}{separator}{hour:02d}:{minute:02d}:{second:02d}"
        f"{fraction}{zone}"
    )


_scheduled = st.one_of(st.none(), st.just(""), _times(), st.text(max_size=6))
_priorities = st.one_of(
    st.none(),
    st.sampled_from(["", "0", "9", "5.0", "5.00", "5.", "10", "-1", "a", "٣", "1e0", " 1"]),
    st.text(max_size=3),
)
# Groups follow a key's rules: the same edges, and the texts a group column repeats.
_groups = st.one_of(_keys, st.sampled_from(["g", "tenant-7", " ", "g" * 200, "g" * 201]))
# An expiry at a time follows a due time's rules; a ttl is a JSON number of seconds,
# 0.001 to 100 years (3,162,240,000), as a number column reads as text.
_TTL_EDGES = [
    *("", "0", "-0", "0.0", "0.001", "0.0010", "1e-3", "1E-3", "0.0009", "1.0E-4", "0.0005"),
    *("0.0015", "0.0025", "2.5e-3", "5", "5.0", "5.", ".5", "-5", "+5", "05", " 5", "5 "),
    *("1e400", "3162240000", "3162240000.0", "3162240000.0001", "3162240001", "3.16224E9"),
    *("1e", "1e+2", "0x10", "NaN", "Infinity", "inf", "true", '"5"', "٣", "1_000"),
    "1" * 400,
    "1" * 5000,
    "0." + "0" * 400 + "1",
]
_ttls = st.one_of(
    st.none(),
    st.sampled_from(_TTL_EDGES),
    st.floats(min_value=-1, max_value=4e9).map(str),
    st.integers(-1, 4_000_000_000).map(str),
    st.text(max_size=4),
)
_expiries = st.one_of(st.none(), st.none(), _scheduled)
_rows = st.tuples(
    _queues,
    _keys,
    _payloads,
    _scheduled,
    _priorities,
    _groups,
    _expiries,
    st.one_of(st.none(), _ttls),
    st.sampled_from([None, None, "invalid_json_line"]),
)


def _compared(rows: list[tuple]) -> None:
    batch = pa.RecordBatch.from_pydict(
        {name: [row[index] for row in rows] for index, name in enumerate(_NAMES)}, schema=_SCHEMA
    )
    verdicts = check_batch(batch, now_ms=NOW, max_payload_bytes=MAX_PAYLOAD_BYTES)
    for index, row in enumerate(rows):
        reason = verdicts.reasons[index].as_py()
        if row[8] is not None:
            assert reason == row[8], row
            continue
        expected = check_row(*row[:8], now_ms=NOW, max_payload_bytes=MAX_PAYLOAD_BYTES)
        assert reason == expected.reason, row
        if reason is None:
            got = (
                verdicts.payloads[index],
                verdicts.due[index].as_py(),
                verdicts.priorities[index].as_py(),
                verdicts.groups[index].as_py(),
                verdicts.expiries[index].as_py(),
            )
            assert got == (
                expected.payload,
                expected.scheduled_at,
                expected.priority,
                expected.group,
                expected.expires_at,
            ), row


@settings(max_examples=400, deadline=None)
@given(st.lists(_rows, max_size=12))
def test_the_batch_check_agrees_with_the_row_check(rows):
    _compared(rows)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.just("q"),
            st.just("k"),
            st.just("1"),
            _times(),
            _priorities,
            _groups,
            _expiries,
            _ttls,
            st.none(),
        ),
        max_size=12,
    )
)
def test_times_priorities_groups_and_expiries_agree(rows):
    _compared(rows)


def test_every_day_of_the_calendar_around_month_ends_and_leap_years():
    days = [
        f"{year:04d}-{month:02d}-{day:02d}T23:59:59.999{zone}"
        for year in (1, 4, 100, 400, 1900, 1969, 1970, 2000, 2023, 2024, 9999)
        for month in range(1, 13)
        for day in range(26, 32)
        for zone in ("Z", "+14:00", "-14:00")
    ]
    _compared([("q", "k", "1", text, None, None, None, None, None) for text in days])
    _compared([("q", "k", "1", None, None, None, text, None, None) for text in days])


def test_every_payload_edge_in_an_otherwise_valid_row():
    _compared([("q", "k", text, None, None, None, None, None, None) for text in _PAYLOAD_EDGES])


def test_every_group_edge_in_an_otherwise_valid_row():
    edges = ["", " ", "g" * 200, "g" * 201, "é" * 200, "é" * 201, "😀" * 200, "😀" * 201]
    edges += [f"g{chr(code)}" for code in (*range(0x20), *range(0x7F, 0xA1))]
    _compared([("q", "k", "1", None, None, text, None, None, None) for text in [None, *edges]])


def test_every_ttl_edge_in_an_otherwise_valid_row_due_now_and_late_in_9999():
    for due in (None, "9999-12-31T00:00:00Z"):
        _compared([("q", "k", "1", due, None, None, None, text, None) for text in _TTL_EDGES])


def test_an_empty_batch():
    _compared([])


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["q", "r", ""]),
            st.sampled_from(["a", "b", "c", "\x01"]),
            st.sampled_from(['"x"', '"y"', "1", "[", None]),
            st.sampled_from(["2026-12-01T09:00:00Z", "2026-12-01T09:00:01Z", "", "soon"]),
            st.sampled_from([None, "1", "2"]),
            st.sampled_from([None, "", "a", "b", "\x01"]),
            st.sampled_from([None, "", "2026-12-02T09:00:00Z", "2026-12-02T09:00:01Z", "x"]),
            st.sampled_from([None, "", "1", "2", "0"]),
            st.sampled_from([None, None, None, "invalid_json_line"]),
        ),
        max_size=30,
    ),
    st.lists(st.integers(1, 8), min_size=1, max_size=30),
)
def test_duplicates_are_settled_as_judge_settles_them_across_batches(rows, sizes):
    """KeyGroups over batches of any sizes picks the winners and duplicates judge picks."""
    rows.sort(key=lambda row: (row[0], row[1]))  # as co_locate leaves them
    judged = list(transforms.judge(rows, now_ms=NOW, max_payload_bytes=MAX_PAYLOAD_BYTES))
    expected_winners = sorted(
        (
            row[0],
            row[1],
            checked.payload,
            checked.scheduled_at,
            checked.priority,
            checked.group,
            checked.expires_at,
        )
        for row, checked in judged
        if checked.reason is None
    )
    expected_duplicates = sorted(
        (row[:8] for row, checked in judged if checked.reason == Reason.DUPLICATE_KEY), key=str
    )
    groups, winners, duplicates, start = KeyGroups(), [], [], 0
    for size in sizes * len(rows):
        if start >= len(rows):
            break
        part = rows[start : start + size]
        start += size
        batch = pa.RecordBatch.from_pydict(
            {name: [row[index] for row in part] for index, name in enumerate(_NAMES)},
            schema=_SCHEMA,
        )
        won, lost = groups.add(
            batch, check_batch(batch, now_ms=NOW, max_payload_bytes=MAX_PAYLOAD_BYTES)
        )
        winners += won
        duplicates += lost
    winners += groups.finish()
    assert sorted(winners) == expected_winners
    assert sorted(duplicates, key=str) == expected_duplicates
