"""The import's row check: the HTTP API's rules, row by row, without Spark."""

from __future__ import annotations

import pytest

from app.domain.formats import parse_timestamp
from app.domain.payloads import MAX_PAYLOAD_DEPTH
from app.pipeline.rows import Reason, check_row

NOW = 1_795_683_600_000


def check(queue="q", key="k", payload="1", scheduled_at="2026-11-27T09:00:00Z", limit=100):
    return check_row(queue, key, payload, scheduled_at, now_ms=NOW, max_payload_bytes=limit)


def nested(depth: int) -> str:
    return '{"a":[' * (depth // 2) + "7" + "]}" * (depth // 2)


def test_a_valid_row_is_stored_as_the_api_would_store_it():
    checked = check(
        payload='{ "b": [1, 2.5, null], "é": "ü" }', scheduled_at="2026-11-27T11:00:00+02:00"
    )
    assert checked.reason is None
    assert checked.payload == '{"b":[1,2.5,null],"é":"ü"}'.encode()
    assert checked.scheduled_at == NOW + 24 * 3600 * 1000  # 09:00 UTC the next day


def test_no_time_means_now():
    assert check(scheduled_at=None).scheduled_at == NOW
    assert check(scheduled_at="").scheduled_at == NOW


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"queue": None}, Reason.MISSING_QUEUE),
        ({"queue": "no spaces"}, Reason.INVALID_QUEUE),
        ({"queue": "q" * 101}, Reason.INVALID_QUEUE),
        ({"key": None}, Reason.MISSING_KEY),
        ({"key": "k" * 201}, Reason.INVALID_KEY),
        ({"key": "tab\there"}, Reason.INVALID_KEY),
        ({"payload": None}, Reason.MISSING_PAYLOAD),
        ({"payload": "not json"}, Reason.INVALID_PAYLOAD),
        ({"payload": "NaN"}, Reason.INVALID_PAYLOAD),
        ({"payload": '{"a": Infinity}'}, Reason.INVALID_PAYLOAD),
        ({"payload": '"' + "x" * 200 + '"'}, Reason.PAYLOAD_TOO_LARGE),
        # Past the API's nesting limit; past pydantic's (which the API once let through,
        # then could not read back); past what Python's parser can build at all.
        ({"payload": nested(MAX_PAYLOAD_DEPTH + 2)}, Reason.PAYLOAD_TOO_DEEP),
        ({"payload": nested(256)}, Reason.PAYLOAD_TOO_DEEP),
        ({"payload": nested(200_000)}, Reason.PAYLOAD_TOO_DEEP),
        ({"scheduled_at": "tomorrow"}, Reason.INVALID_SCHEDULED_AT),
        ({"scheduled_at": "2026-11-27T09:00:00"}, Reason.INVALID_SCHEDULED_AT),  # no zone
        ({"scheduled_at": "2026-02-30T09:00:00Z"}, Reason.INVALID_SCHEDULED_AT),
        ({"scheduled_at": "0001-01-01T00:00:00+01:00"}, Reason.INVALID_SCHEDULED_AT),
    ],
)
def test_rows_the_api_would_refuse_are_refused_with_a_reason(fields, reason):
    assert check(**fields).reason == reason


def test_a_payload_at_the_nesting_limit_is_taken():
    checked = check(payload=nested(MAX_PAYLOAD_DEPTH), limit=1000)
    assert (checked.reason, checked.payload) == (None, nested(MAX_PAYLOAD_DEPTH).encode())


def test_a_json_line_too_deep_to_parse_is_rejected_as_a_payload_too_deep():
    from app.pipeline.transforms import FIELDS, _line_fields

    line = '{"key": "k", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}"
    fields = _line_fields(line, {name: name for name in FIELDS}, "q")
    assert (fields["input_error"], fields["payload"]) == (Reason.PAYLOAD_TOO_DEEP, line)
    # Shallow enough to parse, the line's payload is checked like any other.
    line = '{"key": "k", "payload": ' + nested(MAX_PAYLOAD_DEPTH + 2) + "}"
    fields = _line_fields(line, {name: name for name in FIELDS}, "q")
    assert fields["input_error"] is None
    assert check(payload=fields["payload"]).reason == Reason.PAYLOAD_TOO_DEEP


def test_a_key_may_hold_slashes_and_any_printable_character():
    assert check(key="user/42/friday 09:00 ✓").reason is None


def test_database_urls_map_to_jdbc_sources():
    from app.pipeline.report import jdbc_source

    url, properties = jdbc_source(
        "postgresql+psycopg://app:secret@[::1]:5433/hourglass?sslmode=require"
    )
    assert url == "jdbc:postgresql://[::1]:5433/hourglass"
    assert properties == {
        "driver": "org.postgresql.Driver",
        "fetchsize": "10000",
        "user": "app",
        "password": "secret",
        "sslmode": "require",
        # An idle transaction bounded as the service's are (statement bound + 2 s).
        "options": "-c idle_in_transaction_session_timeout=12000",
    }
    url, properties = jdbc_source("postgresql+psycopg:///hourglass")
    assert url == "jdbc:postgresql://localhost/hourglass"
    assert "user" not in properties  # the driver's default, as libpq's
    assert jdbc_source("sqlite:////var/lib/hourglass.db")[0] == "jdbc:sqlite:/var/lib/hourglass.db"
    url, properties = jdbc_source("mariadb+mysqldb://app:secret@db:3307/hourglass")
    assert url == "jdbc:mysql://db:3307/hourglass?permitMysqlScheme"  # backticks in Spark
    assert properties["driver"] == "org.mariadb.jdbc.Driver"
    assert (properties["user"], properties["password"]) == ("app", "secret")
    assert properties["sessionVariables"] == "idle_transaction_timeout=12"


def test_the_urls_own_session_options_are_kept_beside_the_bounds():
    from app.pipeline.report import jdbc_source
    from app.storage.dialects import Bounds

    _, properties = jdbc_source(
        "postgresql+psycopg://app@db/hourglass?options=-c%20search_path%3Dqueues",
        Bounds(statement=30),
    )
    assert properties["options"] == (
        "-c search_path=queues -c idle_in_transaction_session_timeout=32000"
    )


@pytest.mark.parametrize(
    ("priority", "stored"), [(None, 0), ("", 0), ("0", 0), ("9", 9), ("5.0", 5), ("3.00", 3)]
)
def test_a_priority_is_a_whole_number_0_to_9(priority, stored):
    checked = check_row("q", "k", "1", None, priority, now_ms=NOW, max_payload_bytes=100)
    assert (checked.reason, checked.priority) == (None, stored)


@pytest.mark.parametrize("priority", ["10", "-1", "2.5", '"5"', "true", "five", " 5", "05"])
def test_a_priority_the_api_would_refuse_is_refused_with_a_reason(priority):
    checked = check_row("q", "k", "1", None, priority, now_ms=NOW, max_payload_bytes=100)
    assert checked.reason == Reason.INVALID_PRIORITY


@pytest.mark.parametrize(
    ("group", "stored"),
    [
        (None, None),
        ("", None),  # an empty CSV field
        ("tenant-7", "tenant-7"),
        ("user/42 friday ✓", "user/42 friday ✓"),
        (" ", " "),  # a key's rules: a space is a character like any other
        ("é" * 200, "é" * 200),
    ],
)
def test_a_group_is_a_key_s_text_or_none(group, stored):
    checked = check_row("q", "k", "1", None, None, group, now_ms=NOW, max_payload_bytes=100)
    assert (checked.reason, checked.group) == (None, stored)


@pytest.mark.parametrize("group", ["g" * 201, "é" * 201, "tab\there", "g\n", "g\x00", "g\x85"])
def test_a_group_the_api_would_refuse_is_refused_with_a_reason(group):
    checked = check_row("q", "k", "1", None, None, group, now_ms=NOW, max_payload_bytes=100)
    assert (checked.reason, checked.group) == (Reason.INVALID_GROUP, None)


def test_a_group_is_checked_after_the_other_fields():
    checked = check_row("q", "k", "1", None, "10", "g\n", now_ms=NOW, max_payload_bytes=100)
    assert checked.reason == Reason.INVALID_PRIORITY


@pytest.mark.parametrize(
    ("expires_at", "ttl", "stored"),
    [
        (None, None, None),
        ("", "", None),  # empty CSV fields
        ("2026-11-27T09:00:00Z", None, NOW + 86_400_000),
        ("2026-11-27T11:00:00+02:00", "", NOW + 86_400_000),
        ("2026-11-26T08:00:00Z", None, NOW - 3_600_000),  # before it is due: taken
        (None, "90", NOW + 90_000),
        ("", "1.5", NOW + 1_500),
        (None, "1.0E-3", NOW + 1),  # a double column as Spark writes it
        (None, "0.0025", NOW + 2),  # to the millisecond, half to even as the API rounds
        (None, "3162240000", NOW + 3_162_240_000_000),  # a hundred years
    ],
)
def test_an_expiry_is_a_time_or_a_ttl_after_the_row_is_due(expires_at, ttl, stored):
    checked = check_row(
        "q", "k", "1", None, None, None, expires_at, ttl, now_ms=NOW, max_payload_bytes=100
    )
    assert (checked.reason, checked.expires_at) == (None, stored)


def test_a_ttl_counts_from_the_row_s_due_time_and_ends_with_year_9999():
    later = check_row(
        "q",
        "k",
        "1",
        "2026-11-27T09:00:00Z",
        None,
        None,
        None,
        "60",
        now_ms=NOW,
        max_payload_bytes=100,
    )
    assert later.expires_at == NOW + 86_400_000 + 60_000
    last = check_row(
        "q",
        "k",
        "1",
        "9999-12-31T00:00:00Z",
        None,
        None,
        None,
        "86400",
        now_ms=NOW,
        max_payload_bytes=100,
    )
    assert last.expires_at == parse_timestamp("9999-12-31T23:59:59.999Z")


@pytest.mark.parametrize(
    ("expires_at", "ttl"),
    [
        ("2026-11-27T09:00:00Z", "60"),  # both, as the API refuses
        ("tomorrow", None),
        ("2026-11-27", None),
        ("2026-02-30T09:00:00Z", None),
        ("1700000000000", None),  # epoch ms are no time the API takes
        (None, "0"),
        (None, "-5"),
        (None, "0.0009"),
        (None, "3162240000.5"),
        (None, "1e400"),
        (None, "five"),
        (None, '"5"'),  # a JSON line's string, as the API refuses it
        (None, "NaN"),
        (None, "true"),
        (None, " 5"),
    ],
)
def test_an_expiry_the_api_would_refuse_is_refused_with_a_reason(expires_at, ttl):
    checked = check_row(
        "q", "k", "1", None, None, None, expires_at, ttl, now_ms=NOW, max_payload_bytes=100
    )
    assert (checked.reason, checked.expires_at) == (Reason.INVALID_EXPIRY, None)


def test_an_expiry_is_checked_after_the_other_fields():
    checked = check_row(
        "q", "k", "1", None, None, "g\n", None, "0", now_ms=NOW, max_payload_bytes=100
    )
    assert checked.reason == Reason.INVALID_GROUP
