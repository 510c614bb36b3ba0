"""Pure conversions: times, payloads, database URLs."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.config import Settings, normalize_database_url
from app.domain.errors import InvalidPayload, PayloadTooDeep, PayloadTooLarge
from app.domain.formats import RFC3339_PATTERN, format_timestamp, parse_timestamp, to_epoch_ms
from app.domain.payloads import MAX_PAYLOAD_DEPTH, encode_payload, nesting_depth
from app.storage.dialects import for_engine_url


@pytest.mark.parametrize(
    ("epoch_ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1_795_683_600_000, "2026-11-26T09:00:00.000Z"),
        (1_795_683_600_007, "2026-11-26T09:00:00.007Z"),
        (-1, "1969-12-31T23:59:59.999Z"),
        (-62_135_596_800_000, "0001-01-01T00:00:00.000Z"),
    ],
)
def test_timestamps_print_in_utc_with_milliseconds(epoch_ms, text):
    assert format_timestamp(epoch_ms) == text


def test_aware_datetimes_become_epoch_milliseconds():
    assert (
        to_epoch_ms(datetime(2026, 11, 26, 11, 0, tzinfo=timezone(timedelta(hours=2))))
        == 1_795_683_600_000
    )
    # Sub-millisecond digits are dropped, also before 1970.
    assert to_epoch_ms(datetime(1970, 1, 1, 0, 0, 0, 999, tzinfo=UTC)) == 0
    assert to_epoch_ms(datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)) == -1


@pytest.mark.parametrize(
    "date", ["0001-01-01", "0001-01-02", "9999-12-30", "9999-12-31", "2026-02-28"]
)
@pytest.mark.parametrize("time", ["00:00:00", "23:59:59.999999"])
@pytest.mark.parametrize(
    "zone", ["Z", "z", "+00:00", "-00:00", "+23:59", "-23:59", "+01:00", "-01:00"]
)
def test_the_time_pattern_allows_exactly_the_times_that_print_in_utc(date, time, zone):
    # openapi.yaml states the pattern and the service checks it first: what it allows
    # must parse, and at the ends of time it refuses only what would not print in UTC
    # (0001-01-01 ahead of UTC, 9999-12-31 behind it).
    text = f"{date}T{time}{zone}"
    try:
        parse_timestamp(text)
        parses = True
    except ValueError:
        parses = False
    matches = re.fullmatch(RFC3339_PATTERN, text) is not None
    if matches:
        assert parses, text
    else:
        assert (date, zone[0]) in {("0001-01-01", "+"), ("9999-12-31", "-")}, text


@pytest.mark.parametrize(
    "text",
    ["0000-01-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-01-00T00:00:00Z", "2026-13-01T00:00:00Z",
     "2026-01-32T00:00:00Z", "2026-01-01T24:00:00Z", "2026-01-01T00:60:00Z", "2026-12-31T23:59:60Z",
     "2026-01-01T00:00:00+24:00", "2026-01-01T00:00Z", "2026-01-01 00:00:00Z", "2026-01-01T00:00:00",
     "10000-01-01T00:00:00Z"],
)  # fmt: skip
def test_the_time_pattern_refuses_fields_out_of_range(text):
    assert not re.fullmatch(RFC3339_PATTERN, text)


def test_payloads_encode_compactly_and_round_trip():
    value = {"b": [1, 2.5, None, True], "a": "é ☃"}
    encoded = encode_payload(value, 1000)
    assert encoded == '{"b":[1,2.5,null,true],"a":"é ☃"}'.encode()
    assert json.loads(encoded) == value


def test_payload_limit_counts_encoded_bytes():
    assert encode_payload("é" * 4, 10) == '"éééé"'.encode()  # 10 bytes
    with pytest.raises(PayloadTooLarge):
        encode_payload("é" * 5, 10)


def test_nan_is_not_a_payload():
    with pytest.raises(InvalidPayload):
        encode_payload(float("nan"), 100)


def _nested(depth: int, innermost: object = 7) -> object:
    value = innermost
    for level in range(depth):
        value = [value] if level % 2 else {"a": value}
    return value


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        (7, 0),
        ("[[not nested]]", 0),
        ([], 1),
        ({}, 1),
        ([1, "x", None], 1),
        ({"a": [1], "b": 2}, 2),
        ([[], [[[]]], {"a": {}}], 4),  # the deepest branch counts, wherever it is
        ((1, (2,)), 2),  # tuples encode as arrays
        (_nested(50), 50),
    ],
)
def test_nesting_depth_counts_arrays_and_objects(value, depth):
    assert nesting_depth(value, limit=100) == depth


def test_nesting_depth_stops_counting_past_the_limit():
    assert nesting_depth(_nested(1000), limit=10) == 11


def test_a_payload_nests_at_most_the_limit():
    deepest = _nested(MAX_PAYLOAD_DEPTH)
    assert json.loads(encode_payload(deepest, 1 << 20)) == deepest
    for depth in (MAX_PAYLOAD_DEPTH + 1, 254, 100_000):  # the last past the encoder's recursion
        with pytest.raises(PayloadTooDeep, match=f"more than {MAX_PAYLOAD_DEPTH} levels"):
            encode_payload(_nested(depth), 1 << 30)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:///./hourglass.db", "sqlite:///./hourglass.db"),
        ("mysql://root@h/db", "mysql+mysqldb://root@h/db"),
        ("mariadb://root@h/db", "mariadb+mysqldb://root@h/db"),
    ],
)
def test_plain_database_urls_map_to_our_drivers(url, expected):
    assert normalize_database_url(url) == expected


def test_settings_read_the_environment(monkeypatch):
    monkeypatch.setenv("HOURGLASS_DATABASE_URL", "postgresql://root@db/hourglass")
    monkeypatch.setenv("HOURGLASS_DEFAULT_LEASE", "60")
    monkeypatch.setenv("HOURGLASS_AUTO_MIGRATE", "false")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://root@db/hourglass"
    assert (settings.default_lease, settings.auto_migrate) == (60, False)
    assert (settings.max_payload_bytes, settings.max_request_bytes) == (262_144, 16 * 1024 * 1024)


def test_defaults_need_no_environment(monkeypatch):
    for name in ("HOURGLASS_DATABASE_URL", "HOURGLASS_DEFAULT_LEASE", "HOURGLASS_AUTO_MIGRATE"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.database_url == "sqlite:///./hourglass.db"
    assert (settings.default_lease, settings.auto_migrate) == (300, True)


def test_unsupported_databases_are_refused_with_a_clear_message():
    with pytest.raises(ValueError, match="unsupported database"):
        for_engine_url("oracle+oracledb://u@h/db")
