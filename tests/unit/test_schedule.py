"""Cron arithmetic with fixed instants: alignment, daily lists, expressions, DST, keys."""

from __future__ import annotations

import hashlib
import json
import re
from bisect import bisect_right
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.domain.cron import LIKE_ESCAPE, run_key, run_key_pattern, run_key_range
from app.domain.schedule import (
    CRON_EXPRESSION_PATTERN,
    LATEST_RUN_MS,
    InvalidSchedule,
    Schedule,
    config_hash,
    most_runs_within,
    next_runs,
)


def ms(text: str) -> int:
    """Epoch ms of an ISO time with an offset."""
    return round(datetime.fromisoformat(text).timestamp() * 1000)


def iso(epoch_ms: int, zone: str = "UTC") -> str:
    from zoneinfo import ZoneInfo

    return datetime.fromtimestamp(epoch_ms / 1000, UTC).astimezone(ZoneInfo(zone)).isoformat()


# -- every ----------------------------------------------------------------------------


def test_an_hourly_period_installed_at_10_37_42_first_runs_at_11():
    runs = next_runs(Schedule(every=3600), ms("2026-11-26T10:37:42+00:00"), count=3)
    assert [iso(run) for run in runs] == [
        "2026-11-26T11:00:00+00:00",
        "2026-11-26T12:00:00+00:00",
        "2026-11-26T13:00:00+00:00",
    ]


def test_periods_are_multiples_since_the_epoch_and_strictly_after():
    after = ms("2026-11-26T10:00:00+00:00")  # itself a multiple of 90 s
    runs = next_runs(Schedule(every=90), after, count=2)
    assert runs == [after + 90_000, after + 180_000]
    assert next_runs(Schedule(every=1.5), 1_001, count=2) == [1_500, 3_000]


# -- daily --------------------------------------------------------------------------


def test_daily_times_run_in_order_each_day_once():
    schedule = Schedule(daily=("18:00", "09:30", "09:30"))
    runs = next_runs(schedule, ms("2026-11-26T12:00:00+00:00"), count=4)
    assert [iso(run) for run in runs] == [
        "2026-11-26T18:00:00+00:00",
        "2026-11-27T09:30:00+00:00",
        "2026-11-27T18:00:00+00:00",
        "2026-11-28T09:30:00+00:00",
    ]


def test_daily_times_are_local_to_the_zone():
    schedule = Schedule(daily=("02:00",), timezone="Europe/Bucharest")
    [run] = next_runs(schedule, ms("2026-11-26T12:00:00+00:00"), count=1)
    assert iso(run, "Europe/Bucharest") == "2026-11-27T02:00:00+02:00"


@pytest.mark.parametrize(
    ("zone", "wall", "before_gap", "in_the_gap", "next_day"),
    [
        # Bucharest springs forward at 03:00 local on 2026-03-29 (to 04:00).
        (
            "Europe/Bucharest",
            "03:30",
            "2026-03-28T12:00:00+02:00",
            "2026-03-29T04:00:00+03:00",
            "2026-03-30T03:30:00+03:00",
        ),
        # New York springs forward at 02:00 local on 2026-03-08 (to 03:00).
        (
            "America/New_York",
            "02:30",
            "2026-03-07T12:00:00-05:00",
            "2026-03-08T03:00:00-04:00",
            "2026-03-09T02:30:00-04:00",
        ),
    ],
)
def test_a_local_time_missing_that_day_runs_once_at_the_end_of_the_gap(
    zone, wall, before_gap, in_the_gap, next_day
):
    runs = next_runs(Schedule(daily=(wall,), timezone=zone), ms(before_gap), count=2)
    assert [iso(run, zone) for run in runs] == [in_the_gap, next_day]


@pytest.mark.parametrize(
    ("zone", "wall", "before", "first", "next_day"),
    [
        # Bucharest falls back at 04:00 on 2026-10-25: 03:00-03:59 happens twice.
        (
            "Europe/Bucharest",
            "03:30",
            "2026-10-24T12:00:00+03:00",
            "2026-10-25T03:30:00+03:00",
            "2026-10-26T03:30:00+02:00",
        ),
        # New York falls back at 02:00 on 2026-11-01: 01:00-01:59 happens twice.
        (
            "America/New_York",
            "01:30",
            "2026-10-31T12:00:00-04:00",
            "2026-11-01T01:30:00-04:00",
            "2026-11-02T01:30:00-05:00",
        ),
    ],
)
def test_a_local_time_that_happens_twice_runs_once(zone, wall, before, first, next_day):
    runs = next_runs(Schedule(daily=(wall,), timezone=zone), ms(before), count=2)
    assert [iso(run, zone) for run in runs] == [first, next_day]


def test_two_times_inside_one_gap_run_once():
    schedule = Schedule(daily=("03:15", "03:45"), timezone="Europe/Bucharest")
    runs = next_runs(
        schedule, ms("2026-03-29T00:00:00+02:00"), until=ms("2026-03-29T12:00:00+03:00")
    )
    assert [iso(run, "Europe/Bucharest") for run in runs] == ["2026-03-29T04:00:00+03:00"]


# -- cron expressions ------------------------------------------------------------------


def test_a_weekday_expression_skips_the_weekend():
    schedule = Schedule(cron="0 9 * * 1-5", timezone="Europe/Bucharest")
    runs = next_runs(schedule, ms("2026-11-27T18:00:00+02:00"), count=2)  # a Friday evening
    assert [iso(run, "Europe/Bucharest") for run in runs] == [
        "2026-11-30T09:00:00+02:00",
        "2026-12-01T09:00:00+02:00",
    ]


def test_a_fixed_time_expression_follows_the_dst_rules():
    schedule = Schedule(cron="30 3 * * *", timezone="Europe/Bucharest")
    spring = next_runs(schedule, ms("2026-03-28T12:00:00+02:00"), count=2)
    assert [iso(run, "Europe/Bucharest") for run in spring] == [
        "2026-03-29T04:00:00+03:00",
        "2026-03-30T03:30:00+03:00",
    ]
    autumn = next_runs(schedule, ms("2026-10-24T12:00:00+03:00"), count=2)
    assert [iso(run, "Europe/Bucharest") for run in autumn] == [
        "2026-10-25T03:30:00+03:00",
        "2026-10-26T03:30:00+02:00",
    ]


def test_a_stepped_expression_runs_in_both_occurrences_of_a_repeated_hour():
    schedule = Schedule(cron="*/30 * * * *", timezone="Europe/Bucharest")
    runs = next_runs(schedule, ms("2026-10-25T02:45:00+03:00"), count=5)
    assert [iso(run, "Europe/Bucharest") for run in runs] == [
        "2026-10-25T03:00:00+03:00",
        "2026-10-25T03:30:00+03:00",
        "2026-10-25T03:00:00+02:00",
        "2026-10-25T03:30:00+02:00",
        "2026-10-25T04:00:00+02:00",
    ]
    assert runs == sorted(runs) and len(set(runs)) == len(runs)


def test_until_and_count_bound_the_runs():
    schedule = Schedule(cron="0 * * * *")
    after = ms("2026-11-26T10:30:00+00:00")
    assert len(next_runs(schedule, after, until=after + 3 * 3_600_000)) == 3
    assert len(next_runs(schedule, after, until=after + 10 * 3_600_000, count=2)) == 2
    with pytest.raises(ValueError):
        next_runs(schedule, after)


# -- bad schedules -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"cron": "* * * *"},
        {"cron": "61 * * * *"},
        {"cron": "0 0 30 2 *"},
        {"cron": "0 9 * * *", "timezone": "Mars/Olympus_Mons"},
        {"cron": "0 9 * * *", "every": 60},
        {},
        {"every": 0},
        {"every": -5},
        {"every": 0.5},
        {"every": float("inf")},
        {"every": float("nan")},
        {"every": 1e300},
        {"cron": "0 0 * * * *"},
        {"cron": "* * * * * *"},
        {"cron": "0 9 * * *", "timezone": "localtime"},
        {"daily": ()},
        {"daily": ("24:00",)},
        {"daily": ("9:00",)},
        {"daily": ("09:00:00",)},
    ],
)
def test_bad_schedules_are_refused(arguments):
    with pytest.raises(InvalidSchedule):
        Schedule(**arguments)


# -- hashes and keys -------------------------------------------------------------------


def test_the_config_hash_covers_schedule_zone_and_payload_only():
    base = config_hash(Schedule(daily=("09:00", "18:00")), b'{"r":1}')
    assert base == config_hash(Schedule(daily=("18:00", "09:00", "09:00")), b'{"r":1}')
    assert len(base) == 16
    assert base != config_hash(Schedule(daily=("09:00",)), b'{"r":1}')
    assert base != config_hash(
        Schedule(daily=("09:00", "18:00"), timezone="Europe/Bucharest"), b'{"r":1}'
    )
    assert base != config_hash(Schedule(daily=("09:00", "18:00")), b'{"r":2}')
    assert config_hash(Schedule(every=60), b"1") != config_hash(Schedule(cron="* * * * *"), b"1")


def test_the_config_hash_covers_a_priority_other_than_0_and_keeps_older_hashes():
    schedule, payload = Schedule(every=60), b'{"r":1}'
    # The hash of an entry stored before priorities existed, worked out as it was then.
    canonical = json.dumps(schedule.as_json(), sort_keys=True, separators=(",", ":")).encode()
    before = hashlib.sha256(canonical + b"\n" + payload).hexdigest()[:16]
    assert config_hash(schedule, payload) == config_hash(schedule, payload, 0) == before
    hashes = {config_hash(schedule, payload, priority) for priority in range(10)}
    assert len(hashes) == 10


def test_run_keys_name_the_entry_the_configuration_and_the_utc_instant():
    run = ms("2026-11-27T02:00:00.123+02:00")
    assert run_key("nightly/report", "0123456789abcdef", run) == (
        "nightly/report/0123456789abcdef/20261127-000000.123"
    )


def _like(pattern: str, text: str) -> bool:
    """LIKE with LIKE_ESCAPE, case-sensitive, as the storage must run it."""
    regex, chars = "", iter(pattern)
    for char in chars:
        if char == LIKE_ESCAPE:
            regex += re.escape(next(chars))
        elif char == "%":
            regex += ".*"
        elif char == "_":
            regex += "."
        else:
            regex += re.escape(char)
    return re.fullmatch(regex, text, re.DOTALL) is not None


@pytest.mark.parametrize(
    ("entry", "other"),
    [
        ("a", "a/b"),
        ("a/b", "a"),
        ("a_b", "axb"),
        ("100%", "1000"),
        ("100%", "100%0"),
        ("x\\y", "x\\\\y"),
    ],
)
def test_an_entry_key_pattern_never_matches_another_entry(entry, other):
    hash_ = "0123456789abcdef"
    run = ms("2026-11-27T00:00:00+00:00")
    assert _like(run_key_pattern(entry), run_key(entry, hash_, run))
    assert _like(run_key_pattern(entry, hash_), run_key(entry, hash_, run))
    assert not _like(run_key_pattern(entry, "fedcba9876543210"), run_key(entry, hash_, run))
    assert not _like(run_key_pattern(entry), run_key(other, hash_, run))
    assert not _like(run_key_pattern(other), run_key(entry, hash_, run))


@pytest.mark.parametrize(
    ("zone", "expression", "inside_the_second_copy", "next_run"),
    [
        # New York repeats 01:00-01:59 on 2025-11-02; 06:10Z is 01:10 EST, the second copy.
        (
            "America/New_York",
            "45 1 * * *",
            "2025-11-02T06:10:00+00:00",
            "2025-11-03T01:45:00-05:00",
        ),
        # Bucharest repeats 03:00-03:59 on 2026-10-25; 01:10Z is 03:10 EET, the second copy.
        (
            "Europe/Bucharest",
            "30 3 * * *",
            "2026-10-25T01:10:00+00:00",
            "2026-10-26T03:30:00+02:00",
        ),
    ],
)
def test_a_run_already_passed_in_a_repeated_hour_is_never_offered_again(
    zone, expression, inside_the_second_copy, next_run
):
    schedule = Schedule(cron=expression, timezone=zone)
    after = ms(inside_the_second_copy)
    runs = next_runs(schedule, after, count=2)
    assert all(run > after for run in runs)
    assert iso(runs[0], zone) == next_run
    # The runs after any instant are the tail of the runs after an earlier one.
    earlier = next_runs(schedule, after - 86_400_000, count=4)
    assert runs == [run for run in earlier if run > after][:2]


def test_half_hour_daylight_saving_shifts():
    # Lord Howe Island moves its clocks 30 minutes: 02:00 -> 02:30 on 2026-10-04.
    schedule = Schedule(daily=("02:15",), timezone="Australia/Lord_Howe")
    [run] = next_runs(schedule, ms("2026-10-03T12:00:00+10:30"), count=1)
    assert iso(run, "Australia/Lord_Howe") == "2026-10-04T02:30:00+11:00"


def test_a_skipped_day_is_crossed():
    # Samoa skipped 2011-12-30 entirely: its 12:00 runs at the first instant after.
    schedule = Schedule(daily=("12:00",), timezone="Pacific/Apia")
    runs = next_runs(schedule, ms("2011-12-29T13:00:00-10:00"), count=2)
    assert [iso(run, "Pacific/Apia") for run in runs] == [
        "2011-12-31T00:00:00+14:00",
        "2011-12-31T12:00:00+14:00",
    ]


@pytest.mark.parametrize("after", ["0001-01-01T00:00:00+00:00", "0001-01-02T23:59:59+00:00"])
def test_runs_begin_on_the_third_day_of_year_1(after):
    # As none fall after 9999-12-30: every printable `after` has an answer.
    runs = next_runs(Schedule(daily=("02:00",)), ms(after), count=2)
    assert [iso(run) for run in runs] == ["0001-01-03T02:00:00+00:00", "0001-01-04T02:00:00+00:00"]


# -- the end of time (decision 6) -----------------------------------------------------


def test_a_yearly_expression_near_year_9999_has_the_runs_that_are_left():
    # cronsim looked for 10000-01-01 after the last run and overflowed (a 500).
    runs = next_runs(Schedule(cron="0 0 1 1 *"), ms("9996-03-01T00:00:00+00:00"), count=5)
    assert [iso(run) for run in runs] == [
        "9997-01-01T00:00:00+00:00",
        "9998-01-01T00:00:00+00:00",
        "9999-01-01T00:00:00+00:00",
    ]


_LAST_YEARS = [
    Schedule(cron="0 0 1 1 *"),
    Schedule(cron="0 0 29 2 *", timezone="America/New_York"),
    Schedule(cron="30 2 * * *", timezone="Europe/Bucharest"),
    Schedule(cron="0 * * * *", timezone="Australia/Lord_Howe"),
    Schedule(cron="*/7 * * * *", timezone="Pacific/Kiritimati"),
    Schedule(cron="59 23 31 12 *", timezone="Etc/GMT+12"),
    Schedule(every=1),
    Schedule(every=7 * 86_400),
    Schedule(every=100 * 366 * 86_400),
    Schedule(daily=("00:00", "23:59"), timezone="Etc/GMT+12"),
    Schedule(daily=("23:59",), timezone="Pacific/Kiritimati"),
    Schedule(daily=("02:30",), timezone="America/New_York"),
    Schedule(daily=("02:15",), timezone="Australia/Lord_Howe"),
]


@pytest.mark.parametrize("schedule", _LAST_YEARS, ids=repr)
def test_runs_from_any_instant_of_the_last_years_end_by_9999_12_30(schedule):
    afters = [ms("9995-01-01T00:00:00+00:00") + step * 7_654_321_987 for step in range(40)]
    afters += [LATEST_RUN_MS - 86_400_000, LATEST_RUN_MS - 1, LATEST_RUN_MS, LATEST_RUN_MS + 1]
    afters += [ms("9999-12-31T23:59:59.999+00:00")]
    for after in afters:
        runs = next_runs(schedule, after, count=100)
        assert runs == sorted(set(runs))
        assert all(after < run <= LATEST_RUN_MS for run in runs)


def test_no_run_falls_after_9999_12_30():
    assert next_runs(Schedule(every=1), LATEST_RUN_MS - 2_000, count=5) == [
        LATEST_RUN_MS - 1_000,
        LATEST_RUN_MS,
    ]
    assert next_runs(Schedule(cron="* * * * *"), LATEST_RUN_MS, count=5) == []


# -- key ranges and density (decision 6) ----------------------------------------------

_KEY_CHARACTERS = st.sampled_from(
    ["a", "A", "b", "/", "0", "1", ".", "-", "%", "_", "\\", "é", "😀"]
)


@given(
    name=st.text(_KEY_CHARACTERS, min_size=1, max_size=6),
    key=st.text(_KEY_CHARACTERS, max_size=12),
    configuration=st.booleans(),
)
def test_a_key_range_holds_exactly_the_keys_that_start_with_the_entrys_prefix(
    name, key, configuration
):
    hash_ = "0123456789abcdef" if configuration else None
    after, before = run_key_range(name, hash_)
    prefix = f"{name}/{hash_}/" if configuration else f"{name}/"
    for candidate in (key, prefix + key, name + key):
        inside = candidate.startswith(prefix) and len(candidate) > len(prefix)
        # Code point order, which is UTF-8's byte order: what the databases compare.
        assert (after < candidate < before) == inside
        assert (after.encode() < candidate.encode() < before.encode()) == inside


@pytest.mark.parametrize(("entry", "other"), [("a", "a/b"), ("a", "a0"), ("a/b", "a"), ("a", "A")])
def test_every_run_key_of_an_entry_is_in_its_range(entry, other):
    hash_ = "0123456789abcdef"
    run = ms("2026-11-27T00:00:00+00:00")
    for hashed in (None, hash_):
        after, before = run_key_range(entry, hashed)
        assert after < run_key(entry, hash_, run) < before
    after, before = run_key_range(entry)
    inside = after < run_key(other, hash_, run) < before
    assert inside == other.startswith(entry + "/")  # the pattern tells those apart


@pytest.mark.parametrize(
    ("schedule", "most"),
    [
        (Schedule(every=1), 180),
        (Schedule(every=7), 26),
        (Schedule(every=1.5), 120),
        (Schedule(every=3600), 1),
        (Schedule(cron="* * * * *"), 3),
        (Schedule(cron="0 2 * * *"), 3),
        (Schedule(daily=("09:00", "09:01", "09:02", "09:03")), 3),
    ],
    ids=repr,
)
def test_the_most_runs_within_a_span(schedule, most):
    assert most_runs_within(schedule, 180_000) == most


@pytest.mark.parametrize(
    "schedule",
    [
        Schedule(every=7),
        Schedule(every=1.5),
        Schedule(cron="* * * * *", timezone="America/New_York"),
        Schedule(cron="*/2 1 * * *", timezone="Europe/Bucharest"),
        Schedule(daily=("01:59", "02:00", "02:01", "02:30", "03:00"), timezone="America/New_York"),
    ],
    ids=repr,
)
def test_no_span_holds_more_runs_than_most_runs_within_says(schedule):
    # Days with a daylight-saving change in New York and Bucharest, and one without.
    for day in ("2026-03-08T00:00:00-05:00", "2026-10-25T00:00:00+03:00", "2026-06-01T00:00:00Z"):
        runs = next_runs(schedule, ms(day), until=ms(day) + 6 * 3_600_000)
        span = 180_000
        most = most_runs_within(schedule, span)
        # The fullest spans start just before a run.
        assert all(
            bisect_right(runs, run - 1 + span) - index <= most for index, run in enumerate(runs)
        )


# -- the schema's cron pattern (decision 15) --------------------------------------------

# Pieces of cron's grammar, in range and not, with the separators between them.
_CRON_PIECES = (
    "*", "0", "5", "07", "000", "23", "24", "31", "32", "59", "60", "12", "13", "7", "8",
    "L", "l", "LW", "lw", "W", "5L", "8L", "1#5", "1#6", "MON#2", "mon", "Jan", "FRI", "jul",
    "SUN", "XYZ", "?", "*/5", "*/0", "1-5", "5-1", "MON-FRI", "1-5/2", "L/2", "0/1",
    ",", "-", "/", "#",
)  # fmt: skip


def _cronsim_error(expression: str) -> str | None:
    try:
        Schedule(cron=expression)
    except InvalidSchedule as error:
        return str(error)
    return None


def _cronsim_reads(expression: str) -> bool:
    return _cronsim_error(expression) is None


_MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
_WEEKDAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def _forward(expression: str) -> str:
    """The expression with every range put forward (`5-1` becomes `1-5`)."""

    def number(text: str) -> int:
        upper = text.upper()
        if upper in _MONTHS:
            return _MONTHS.index(upper) + 1
        return _WEEKDAYS.index(upper) if upper in _WEEKDAYS else int(text)

    def turn(match: re.Match[str]) -> str:
        low, high = match.group(1), match.group(2)
        return f"{high}-{low}" if number(low) > number(high) else match.group(0)

    return re.sub(r"([0-9]+|[A-Za-z]{3})-([0-9]+|[A-Za-z]{3})", turn, expression)


@settings(max_examples=2000)
@given(
    st.lists(
        st.lists(st.sampled_from(_CRON_PIECES), min_size=1, max_size=3), min_size=5, max_size=5
    )
)
def test_the_schema_s_cron_pattern_takes_every_expression_cronsim_reads(fields):
    # openapi.yaml states the pattern and the service checks it first: an expression it
    # refused would be refused by the service, and one cronsim refuses that matches it
    # must be one no pattern can tell (a range backwards, or a day no month has).
    expression = " ".join("".join(pieces) for pieces in fields)
    matches = re.fullmatch(CRON_EXPRESSION_PATTERN, expression) is not None
    if _cronsim_reads(expression):
        assert matches, expression
    elif matches:
        error = _cronsim_error(_forward(expression))
        assert error is None or "day-of-month" in error, (expression, error)


@pytest.mark.parametrize(
    "expression",
    ["0 2 * * *", "*/15 9-17 * * MON-FRI", "0 0 L * *", "0 0 lw * *", "0 0 * * 5L",
     "0 0 * * mon#2", "0 0 1,15 * *", "0 0 * JAN-MAR,dec SUN", "00 00 01 01 *",
     "0 0 L/2 * *", "0 12 * * sun-sat/2", "0-59/7 * * * *", "\t0 2 * * *  "],
)  # fmt: skip
def test_expressions_cronsim_reads_match_the_pattern(expression):
    assert _cronsim_reads(expression)
    assert re.fullmatch(CRON_EXPRESSION_PATTERN, expression)


@pytest.mark.parametrize(
    "expression",
    ["61 * * * *", "0 24 * * *", "0 0 0 * *", "0 0 * 13 *", "0 0 * * 8", "*/0 * * * *",
     "0 0 * * 1#6", "0 0 ? * *", "0 0 15W * *", "0 0 * * * *", "0 0 * *", "0\n0 * * *"],
)  # fmt: skip
def test_expressions_of_the_wrong_shape_do_not_match_the_pattern(expression):
    assert not _cronsim_reads(expression) or expression.count(" ") != 4
    assert not re.fullmatch(CRON_EXPRESSION_PATTERN, expression)
