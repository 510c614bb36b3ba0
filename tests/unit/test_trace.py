"""The trace context of an offer's headers (app/domain/trace.py): what W3C Trace Context
level 1 takes is kept, whole; anything malformed is left out, never an error."""

from __future__ import annotations

import pytest

from app.domain.trace import (
    MAX_TRACEPARENT,
    MAX_TRACESTATE,
    MAX_TRACESTATE_MEMBERS,
    Trace,
    trace_of,
    trace_of_headers,
    valid_traceparent,
)

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"
PARENT = f"00-{TRACE_ID}-{PARENT_ID}-01"
MOST_MEMBERS = ",".join(f"k{number}=v" for number in range(MAX_TRACESTATE_MEMBERS))


@pytest.mark.parametrize(
    "value",
    [
        PARENT,
        f"00-{TRACE_ID}-{PARENT_ID}-00",
        f"00-{TRACE_ID}-{PARENT_ID}-ff",  # flags: any two hex digits
        f"01-{TRACE_ID}-{PARENT_ID}-01",  # a later version, 55 characters
        f"cc-{TRACE_ID}-{PARENT_ID}-09-ab-cd-0123",  # a later version, longer
        f"fe-{TRACE_ID}-{PARENT_ID}-01-" + "a" * (MAX_TRACEPARENT - 56),  # at its bound
        f"00-{'0' * 31}1-{'0' * 15}1-01",  # zeros but one
    ],
)
def test_a_valid_traceparent_is_kept_whole(value):
    assert valid_traceparent(value)
    assert trace_of([value], []) == Trace(value, None)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "00",
        PARENT[:-1],  # too short
        PARENT + "0",  # version 00 is exactly 55 characters
        PARENT + "-more",  # ... even with a dash after them
        f"ff-{TRACE_ID}-{PARENT_ID}-01",  # version ff is forbidden
        f"01-{TRACE_ID}-{PARENT_ID}-01x",  # a later version: a `-` after the 55th
        f"01-{TRACE_ID}-{PARENT_ID}-01-" + "a" * (MAX_TRACEPARENT - 55),  # past the bound
        f"01-{TRACE_ID}-{PARENT_ID}-01-a b",  # no spaces in what comes later
        f"01-{TRACE_ID}-{PARENT_ID}-01-a\nb",  # nor a newline
        f"01-{TRACE_ID}-{PARENT_ID}-01-x",  # lowercase hex and dashes only
        f"01-{TRACE_ID}-{PARENT_ID}-01-A",
        PARENT.upper(),  # lowercase only
        f"00-{TRACE_ID.upper()}-{PARENT_ID}-01",
        f"0g-{TRACE_ID}-{PARENT_ID}-01",  # hex only
        f"00-{TRACE_ID[:-1]}x-{PARENT_ID}-01",
        f"00-{TRACE_ID}-{PARENT_ID[:-1]}x-01",
        f"00-{TRACE_ID}-{PARENT_ID}-0x",
        f"00-{'0' * 32}-{PARENT_ID}-01",  # a trace id of zeros
        f"00-{TRACE_ID}-{'0' * 16}-01",  # a parent id of zeros
        f"00_{TRACE_ID}_{PARENT_ID}_01",
        f"00-{TRACE_ID}{PARENT_ID}-01-",
    ],
)
def test_a_malformed_traceparent_leaves_no_trace(value):
    assert not valid_traceparent(value)
    assert trace_of([value], ["vendor=value"]) is None


def test_more_than_one_traceparent_leaves_no_trace():
    assert trace_of([PARENT, PARENT], []) is None
    assert trace_of([], ["vendor=value"]) is None


def test_spaces_around_the_traceparent_are_trimmed():
    assert trace_of([f" \t{PARENT} "], []) == Trace(PARENT)


@pytest.mark.parametrize(
    ("states", "kept"),
    [
        ([], None),
        ([""], None),
        (["vendor=value"], "vendor=value"),
        (["a=1,b=2"], "a=1,b=2"),
        (["a=1", "b=2"], "a=1,b=2"),  # several headers joined
        (["a=1 , ,b=2,,", " c=3\t"], "a=1,b=2,c=3"),  # trimmed, empty members skipped
        (["tenant@system=x"], "tenant@system=x"),
        (["0k_-*/=v"], "0k_-*/=v"),
        (['k=a value with "quotes" and \\ and ~!'], 'k=a value with "quotes" and \\ and ~!'),
        (["k=" + "v" * 256], "k=" + "v" * 256),
        (["k" * 256 + "=v"], "k" * 256 + "=v"),
        ([MOST_MEMBERS], MOST_MEMBERS),
    ],
)
def test_a_valid_tracestate_is_kept_with_its_traceparent(states, kept):
    assert trace_of([PARENT], states) == Trace(PARENT, kept)


@pytest.mark.parametrize(
    "states",
    [
        ["Key=value"],  # keys are lowercase
        ["_key=value"],
        ["key"],  # no value
        ["key="],  # an empty value
        ["=value"],
        ["key=va=lue"],  # no `=` in a value
        ["key=value\x7f"],
        ["key=välue"],  # printable ASCII only
        ["key=a\nb"],
        ["tenant@Sys=x"],
        ["tenant@system@more=x"],
        ["k" * 257 + "=v"],  # a key of at most 256
        ["k=" + "v" * 257],  # a value of at most 256
        ["good=1", "Bad=2"],  # one bad member drops it all
        [MOST_MEMBERS, "one=more"],  # too many
    ],
)
def test_a_malformed_tracestate_is_dropped_alone(states):
    assert trace_of([PARENT], states) == Trace(PARENT, None)


def test_a_tracestate_at_its_bound_is_kept():
    state = "a=" + "v" * 254 + ",b=" + "v" * (MAX_TRACESTATE - 256 - 3)
    assert len(state) == MAX_TRACESTATE
    assert trace_of([PARENT], [state]) == Trace(PARENT, state)


def _member(key: str, length: int) -> str:
    return f"{key}=" + "v" * (length - len(key) - 1)


@pytest.mark.parametrize(
    ("members", "kept"),
    [
        # The long member goes first, wherever it stands, before the short ones at the end.
        (
            ["a=1", _member("long", 250), "b=2", *(_member(key, 100) for key in "cde")],
            ["a", "b", "c", "d", "e"],
        ),
        # The right-most long member first: removing it is enough.
        (["a=1", _member("long", 255), "b=2", _member("c", 255)], ["a", "long", "b"]),
        ([_member("x", 200), _member("y", 200), _member("z", 200)], ["x", "y"]),
        (["a=" + "v" * 256, "b=" + "v" * 256], ["a"]),
        # No member long: members go from the end.
        ([_member(f"k{n}", 100) for n in range(6)], [f"k{n}" for n in range(5)]),
    ],
)
def test_a_tracestate_too_long_is_truncated_as_w3c_says(members, kept):
    assert len(",".join(members)) > MAX_TRACESTATE
    trace = trace_of([PARENT], [",".join(members)])
    assert trace is not None and trace.tracestate is not None
    assert [member.split("=")[0] for member in trace.tracestate.split(",")] == kept
    assert len(trace.tracestate) <= MAX_TRACESTATE


def test_headers_are_read_in_one_pass():
    headers = [
        (b"content-type", b"application/json"),
        (b"tracestate", b"a=1"),
        (b"traceparent", PARENT.encode()),
        (b"tracestate", b"b=2"),
    ]
    assert trace_of_headers(headers) == Trace(PARENT, "a=1,b=2")
    assert trace_of_headers([(b"tracestate", b"a=1")]) is None
    assert trace_of_headers([]) is None
    assert trace_of_headers([(b"traceparent", PARENT.encode())] * 2) is None
    assert trace_of_headers([(b"traceparent", "00-é".encode())]) is None


@pytest.mark.parametrize(
    "trace", [Trace(PARENT), Trace(PARENT, "a=1,b=2"), Trace(PARENT, 'k=with "spaces" too')]
)
def test_a_trace_is_stored_and_read_back(trace):
    stored = trace.stored()
    assert stored.count("\n") == (trace.tracestate is not None)
    assert Trace.of_stored(stored) == trace
    assert Trace.of_stored(None) is None
