"""The bodies and parameters of cron entries' routes: an entry to install, an entry as
read (with its next runs), a list of them."""

from __future__ import annotations

from typing import Annotated

from fastapi import Path, Query
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema
from pydantic_core import PydanticCustomError

from app.api.schemas.fields import (
    ANY_PAYLOAD,
    GROUP_DESCRIPTION,
    PRIORITY_DESCRIPTION,
    TIMES,
    MessageGroup,
    Number,
    Payload,
    Priority,
    RequestBody,
    Timestamp,
)
from app.domain.cron import MAX_LOOKAHEAD_MS, MAX_RUNS_SHOWN, InstallOutcome
from app.domain.formats import CRON_NAME_PATTERN, RFC3339_PATTERN
from app.domain.messages import DEFAULT_PRIORITY, MAX_DELAY_SECONDS, MIN_TTL_SECONDS
from app.domain.schedule import (
    CRON_EXPRESSION_PATTERN,
    DAILY_TIME_PATTERN,
    MAX_EVERY_SECONDS,
    MIN_EVERY_SECONDS,
    InvalidSchedule,
    Schedule,
)

# An entry installs its runs at most this far ahead.
MAX_LOOKAHEAD_SECONDS = MAX_LOOKAHEAD_MS // 1000

CronName = Annotated[
    str,
    Path(
        pattern=CRON_NAME_PATTERN, description="Entry name: 1-100 characters, no control characters"
    ),
]
RunsAfter = Annotated[
    str | None,
    Query(
        pattern=RFC3339_PATTERN,
        json_schema_extra={"format": "date-time"},
        description=f"RFC 3339 instant ({TIMES}); default: now. Runs fall after "
        "0001-01-03T00:00:00Z and at the latest on 9999-12-30T00:00:00Z",
    ),
]
RunsShown = Annotated[int, Query(ge=1, le=MAX_RUNS_SHOWN, description="How many runs to show")]


class CronInstallRequest(RequestBody):
    """Body of `PUT …/cron/{name}`: exactly one of `cron`, `every` and `daily`."""

    # Exactly one schedule, in the schema too (a null is as if left out).
    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["cron"], "properties": {"cron": {"type": "string"}}},
                {"required": ["every"], "properties": {"every": {"type": "number"}}},
                {"required": ["daily"], "properties": {"daily": {"type": "array"}}},
            ]
        }
    )

    payload: Payload = Field(description=f"{ANY_PAYLOAD}: every run carries it")
    cron: str | None = Field(
        None,
        pattern=CRON_EXPRESSION_PATTERN,
        description="A 5-field cron expression, e.g. `0 2 * * 1-5`: minute, hour, day of the "
        "month (or `L`, `LW`), month (or `JAN`…), weekday (0-7 or `SUN`…, `5L`, `MON#2`), "
        "apart by spaces or tabs; `*`, lists, ranges and steps. One with a range backwards "
        "(`5-3`) or a day no month has (`0 0 30 2 *`) is `422`",
    )
    every: Number | None = Field(
        None,
        ge=MIN_EVERY_SECONDS,
        le=MAX_EVERY_SECONDS,
        description="Seconds between runs, on multiples of the period since the epoch",
    )
    daily: list[Annotated[str, Field(pattern=DAILY_TIME_PATTERN)]] | None = Field(
        None, min_length=1, description='Local times, `["HH:MM", …]` (00:00-23:59)'
    )
    timezone: str = Field(
        "UTC",
        description="IANA time zone the schedule is read in; a name the service's time zone "
        "database does not know is `422`",
    )
    priority: Priority = Field(
        DEFAULT_PRIORITY,
        description=f"Every run's priority ({PRIORITY_DESCRIPTION}); part of the "
        "configuration: a change replaces the runs not yet delivered",
    )
    group: MessageGroup = Field(
        None,
        description=f"Every run's group ({GROUP_DESCRIPTION}); part of the configuration",
    )
    ttl: Number | None = Field(
        None,
        ge=MIN_TTL_SECONDS,
        le=MAX_DELAY_SECONDS,
        description="Seconds after each run is due until it expires (never delivered after "
        "it: it then moves to the queue's dead-letter queue, `expired`: true, or is removed; "
        "at the latest 9999-12-31T23:59:59.999Z); none (or null): runs do not expire. Part "
        "of the configuration. An entry takes no `expires_at` (`422`): one time for every "
        "run would expire all the runs after it",
    )
    # Not a field of an entry (docs/decisions/0028-expiry.md): declared, out of the schema,
    # only so that a body giving it is refused with words saying why, not as any unknown
    # field. Any value, null too: a producer that sends it expects it to mean something.
    expires_at: SkipJsonSchema[JsonValue] = Field(None, exclude=True)
    lookahead: Number | None = Field(
        None,
        gt=0,
        le=MAX_LOOKAHEAD_SECONDS,
        description=(
            "Seconds ahead to keep runs installed (default: an hour; taken as at least five "
            "minutes): at least the next run, and never more runs than the entry may keep"
        ),
    )

    @field_validator("expires_at", mode="before")
    @classmethod
    def _ttl_only(cls, value: object) -> None:
        raise PydanticCustomError(
            "extra_forbidden",
            "a cron entry takes no expires_at: give ttl, the seconds after each run is due "
            "until it expires (one time for every run would expire all the runs after it)",
        )

    @model_validator(mode="after")
    def _a_schedule_that_can_run(self) -> CronInstallRequest:
        self.schedule()
        return self

    def schedule(self) -> Schedule:
        try:
            return Schedule(
                cron=self.cron,
                every=self.every,
                daily=tuple(self.daily) if self.daily is not None else None,
                timezone=self.timezone,
            )
        except InvalidSchedule as error:
            raise ValueError(str(error)) from error


class CronEntryResponse(BaseModel):
    queue: str
    name: str
    cron: str | None
    every: float | None
    daily: list[str] | None
    timezone: str
    payload: JsonValue
    lookahead: float | None = Field(description="Seconds; null for the default")
    priority: int = Field(description="Every run's priority")
    group: str | None = Field(description="Every run's group; null: none")
    ttl: float | None = Field(
        description="Seconds after each run is due until it expires; null: runs do not expire"
    )
    config_hash: str = Field(
        description="Identifies schedule, time zone, payload, priority, group and ttl"
    )
    created_at: Timestamp
    updated_at: Timestamp
    paused: bool = Field(description="Paused: it installs no runs until resumed")
    paused_at: Timestamp | None = Field(description="Since when it has been paused")
    next_runs: list[Timestamp] = Field(description="The next runs it installs (none while paused)")


class CronInstallResponse(CronEntryResponse):
    outcome: InstallOutcome


class CronListResponse(BaseModel):
    entries: list[CronEntryResponse]
