"""A message's trace context: the W3C `traceparent` and `tracestate` headers of the request
that offered it, read and checked (Trace Context level 1), and as the database stores them
(docs/decisions/0029-trace-context.md).

A malformed traceparent leaves the request without a trace (neither header kept); a
malformed tracestate is dropped alone, and one too long is truncated as W3C says. None of
it is an error: tracing never breaks an offer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# The longest traceparent kept (a later version's may be longer than version 00's 55
# characters), and the longest tracestate once its headers are joined.
MAX_TRACEPARENT = 512
MAX_TRACESTATE = 512
# The most list-members a tracestate may carry.
MAX_TRACESTATE_MEMBERS = 32
# A tracestate over MAX_TRACESTATE loses its members longer than this first (W3C's
# truncation), then members from its end, until it fits.
LONG_TRACESTATE_MEMBER = 128
# Between the two in the stored column: neither header can hold a newline.
_SEPARATOR = "\n"
# What a message's trace context adds to its JSON (app/domain/rendering.py) over the
# `null` of one without, at most, per character of its stored form: all of it is ASCII,
# only a tracestate value's `"` and `\` are escaped (as 2 bytes), and the object's own
# keys and quotes (30 bytes more) are fewer than a traceparent's 55 characters. A poll
# counts it so (app/storage/claims.py); tests/unit/test_rendering.py renders the widest.
RENDERED_PER_STORED = 2

# version-traceid-parentid-flags, lowercase hex; any version but ff.
_TRACEPARENT = re.compile(r"(?!ff)[0-9a-f]{2}-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_ZERO_TRACE_ID = "0" * 32
_ZERO_PARENT_ID = "0" * 16
# What a later version may add after the first 55 characters: a `-`, then lowercase hex
# and dashes (its fields, whatever they are).
_LATER_FIELDS = re.compile(r"-[0-9a-f-]*")
# key=value: a key of a simple name or tenant@system, a value of printable ASCII but `,` and
# `=` (1-256 characters, not ending in a space).
_MEMBER = re.compile(
    r"[a-z0-9][_0-9a-z\-*/]{0,255}(?:@[a-z][_0-9a-z\-*/]{0,13})?"
    r"=[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
)
_SPACES = " \t"


@dataclass(frozen=True, slots=True)
class Trace:
    """The trace context a message was offered with: a valid traceparent, and its
    tracestate when it came with a valid one."""

    traceparent: str
    tracestate: str | None = None

    def stored(self) -> str:
        """As the message's `trace` column holds it: the traceparent, then a newline and the
        tracestate when there is one."""
        if self.tracestate is None:
            return self.traceparent
        return self.traceparent + _SEPARATOR + self.tracestate

    @classmethod
    def of_stored(cls, stored: str | None) -> Trace | None:
        """The Trace a `trace` column holds (None: the message has none)."""
        if stored is None:
            return None
        traceparent, _, tracestate = stored.partition(_SEPARATOR)
        return cls(traceparent, tracestate or None)


def trace_of(traceparents: Sequence[str], tracestates: Sequence[str]) -> Trace | None:
    """The trace context of a request's `traceparent` and `tracestate` header values, or
    None when there is no traceparent, more than one, or a malformed one. A tracestate
    that is malformed (once several are joined) is left out."""
    if len(traceparents) != 1:
        return None
    traceparent = traceparents[0].strip(_SPACES)
    if not valid_traceparent(traceparent):
        return None
    return Trace(traceparent, _tracestate(tracestates))


def valid_traceparent(value: str) -> bool:
    """Whether `value` is a traceparent of Trace Context level 1: version 00 exactly, or a
    later version's first 55 characters in version 00's shape (then a `-` and more, if
    longer, at most MAX_TRACEPARENT in all); never a trace id or parent id of zeros."""
    if len(value) > MAX_TRACEPARENT:
        return False
    fields = _TRACEPARENT.match(value)
    if fields is None:
        return False
    if len(value) > 55 and (value.startswith("00") or not _LATER_FIELDS.fullmatch(value, 55)):
        return False
    return fields[1] != _ZERO_TRACE_ID and fields[2] != _ZERO_PARENT_ID


def _tracestate(values: Sequence[str]) -> str | None:
    """The tracestate of these header values, joined by `,`, its members trimmed and empty
    ones skipped; None when there is none, or it is malformed."""
    members = [
        member
        for value in values
        for member in (part.strip(_SPACES) for part in value.split(","))
        if member
    ]
    if not members or len(members) > MAX_TRACESTATE_MEMBERS:
        return None
    if not all(_MEMBER.fullmatch(member) for member in members):
        return None
    joined = ",".join(members)
    return joined if len(joined) <= MAX_TRACESTATE else _truncated(members)


def _truncated(members: list[str]) -> str | None:
    """A tracestate too long, cut as Trace Context says a vendor may: its members longer
    than LONG_TRACESTATE_MEMBER removed first (the right-most first), then members from
    its end, until it fits in MAX_TRACESTATE; None when nothing is left."""
    kept = list(members)
    size = len(",".join(kept))
    for index in reversed(range(len(kept))):
        if size <= MAX_TRACESTATE:
            break
        if len(kept[index]) > LONG_TRACESTATE_MEMBER:
            size -= len(kept.pop(index)) + 1
    while kept and size > MAX_TRACESTATE:
        size -= len(kept.pop()) + 1
    return ",".join(kept) or None


def trace_of_headers(headers: Iterable[tuple[bytes, bytes]]) -> Trace | None:
    """The trace context of a request's raw headers (ASGI's: lowercase names, bytes), in
    one pass over them; None at once when no traceparent came."""
    traceparents: list[str] | None = None
    tracestates: list[str] = []
    for name, value in headers:
        if name == b"traceparent":
            if traceparents is None:
                traceparents = []
            traceparents.append(value.decode("latin-1"))
        elif name == b"tracestate":
            tracestates.append(value.decode("latin-1"))
    if traceparents is None:
        return None
    return trace_of(traceparents, tracestates)
