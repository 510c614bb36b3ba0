"""What several of the API's request and answer bodies share: queue names, times, numbers,
priorities, groups, payloads, pages, and the base of every request body.

Times travel as RFC 3339 strings in UTC with milliseconds; inside they are epoch
milliseconds. Durations are seconds.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    SkipValidation,
    Strict,
    WithJsonSchema,
)

from app.domain.formats import KEY_PATTERN, QUEUE_PATTERN, RFC3339_PATTERN, format_timestamp
from app.domain.messages import DEFAULT_PRIORITY, MAX_PRIORITY
from app.domain.pages import CURSOR_PATTERN, MAX_CURSOR_LENGTH, MAX_PAGE
from app.domain.payloads import MAX_PAYLOAD_DEPTH

QueueName = Annotated[
    str, Path(pattern=QUEUE_PATTERN, description="Queue name: `[A-Za-z0-9][A-Za-z0-9._-]{0,99}`")
]

PageLimit = Annotated[
    int, Query(ge=1, le=MAX_PAGE, description=f"At most this many (1-{MAX_PAGE})")
]
Cursor = Annotated[
    str | None,
    Query(
        # base64url without padding, as app/domain/pages.py writes them.
        pattern=CURSOR_PATTERN,
        max_length=MAX_CURSOR_LENGTH,
        description="The `next` of the previous page; omit it for the first page. "
        "One this list did not hand out names no page: `404`",
    ),
]

Timestamp = Annotated[
    int,
    PlainSerializer(format_timestamp, return_type=str),
    WithJsonSchema(
        {"type": "string", "format": "date-time", "example": "2026-11-26T09:00:00.000Z"},
        mode="serialization",
    ),
]
# JSON numbers only: "60" or true must not pass for a number of seconds.
Number = Annotated[float, Strict()]


def whole_number(value: object) -> object:
    """A float without a fraction as the int it is; anything else as it is.

    JSON Schema's `integer` is any number without a fraction, so 69.0 is one (and some
    JSON encoders write whole floats so): take it as 69. Strings and booleans stay out.
    An integer field within bounds is `Annotated[int, Strict(), Field(ge=…, le=…),
    BeforeValidator(whole_number)]`: the bounds come before the conversion so that the
    schema shows them (pydantic cannot read bounds placed after a validator).
    """
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


Priority = Annotated[
    int,
    Strict(),
    Field(ge=DEFAULT_PRIORITY, le=MAX_PRIORITY),
    BeforeValidator(whole_number),
]
PRIORITY_DESCRIPTION = (
    f"{DEFAULT_PRIORITY}-{MAX_PRIORITY}: among the messages due at poll time, higher ones "
    "are delivered first, then earlier due ones"
)
GROUP_DESCRIPTION = (
    "1-200 characters, a key's rules: the message's group, if any. A queue leases at most "
    "its `group_concurrency` (default 1) of one group at once, in due-time order; null or "
    "none is no group"
)
MessageGroup = Annotated[str | None, Field(pattern=KEY_PATTERN)]
# What the time pattern allows, in words.
TIMES = (
    "years 0001-9999, in UTC too: on 0001-01-01 no offset ahead of UTC, on 9999-12-31 none behind"
)
RFC3339 = Annotated[
    str,
    Field(pattern=RFC3339_PATTERN, json_schema_extra={"format": "date-time"}),
]
# A payload in a request, as the body's JSON parser built it. pydantic does not walk it
# again: the domain checks every payload, whichever way it comes in, in one place
# (app/domain/payloads.py: NaN, nesting, size). pydantic's walk would also copy it
# (10-19 ms for 256 KiB, measured) and give up at 255 levels with an error of its own.
Payload = Annotated[JsonValue, SkipValidation]
ANY_PAYLOAD = f"Any JSON value, arrays and objects nested at most {MAX_PAYLOAD_DEPTH} levels deep"


class RequestBody(BaseModel):
    """The base of every request body: a field it does not know is refused."""

    # A typo such as `delay_seconds` must not silently mean "now".
    model_config = ConfigDict(extra="forbid")
