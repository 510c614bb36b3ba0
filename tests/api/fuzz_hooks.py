"""schemathesis hooks for tests/api/test_fuzz.py (loaded through SCHEMATHESIS_HOOKS): the
refusals no OpenAPI document can foretell, the methods of paths that are also cron entries,
and long polls kept short.

Every other rule of a request is in openapi.yaml, so `positive_data_acceptance` holds the
service to it: a request the schema allows is taken. A few rules weigh one parameter
against another, or against what the service knows, which a JSON Schema cannot say;
their refusals are listed here, each by operation, status and problem type (and, for the
generic `invalid-request`, the words of the rule), so that any other refusal of a
schema-valid request still fails the run.
"""

from __future__ import annotations

import json
from typing import Any

import schemathesis
from schemathesis.openapi.checks import (
    AllowHeaderMismatch,
    EnsureResourceAvailability,
    RejectedPositiveData,
    UnsupportedMethodResponse,
)

POLL = "POST /v1/queues/{queue}/poll"
# A long poll that finds nothing answers after `wait` seconds (up to 20): the run
# would spend most of its time waiting. Any wait the schema allows is still sent,
# shortened to this; what waiting does is tested in tests/contract/test_poll.py.
SHORTEST_WAIT = 0.05

# operation -> the refusals a schema-valid request may get: (status, problem type, words).
FORESEEN: dict[str, list[tuple[int, str, str]]] = {
    # `confirm` must repeat the path's queue name, else 400 (no schema can say it: decision 15).
    "DELETE /v1/queues/{queue}": [(400, "purge-not-confirmed", "")],
    "PUT /v1/queues/{queue}/settings": [
        # `dead_letter_queue` must differ from the path's queue.
        (422, "invalid-settings", "its own dead-letter queue"),
        # With `max_deliveries` and no `dead_letter_queue`, `{queue}.dead` must be a
        # queue name: the path's queue is at most 95 characters.
        (422, "invalid-settings", "would be longer than"),
        # A push url must match a prefix of the service's HOURGLASS_PUSH_ALLOWED (unset
        # here, so no push is taken): what the service is configured with.
        (422, "invalid-settings", "HOURGLASS_PUSH_ALLOWED"),
    ],
    "PUT /v1/queues/{queue}/cron/{name}": [
        # A cron expression's range backwards (5-1) or a day no month has (30 of
        # February): the schema states every field, not how they compare.
        (422, "invalid-request", "invalid cron expression"),
        # Names the service's time zone database knows, which vary with its version.
        (422, "invalid-request", "unknown time zone"),
        # A payload too large for how often the schedule runs (docs/guide/cron.md).
        (422, "cron-entry-too-large", ""),
    ],
}


# A cron entry's name may hold slashes, so …/cron/x/pause is also the entry
# "x/pause": a PUT, GET or DELETE there is that entry's install, read or uninstall (a 422
# for a PUT without a body, a 404 for an entry not there), not a method the path lacks,
# and its 405's Allow names the entry's methods too.
# OpenAPI cannot say that two templated paths overlap; tests/api/test_openapi.py checks
# that every 405's Allow names the methods of both.
ENTRY_PATHS = {
    "/v1/queues/{queue}/cron/{name}/pause",
    "/v1/queues/{queue}/cron/{name}/resume",
}


# Messages offered with an expiry, by (queue, key): one whose expiry had passed when it was
# offered (a time the schema allows, in year 608, say) is swept within a second
# (docs/decisions/0028-expiry.md), so a stateful run's next request may well not find the
# message it just created. Only those are excused from "created resource not found".
OFFERS = {"PUT /v1/queues/{queue}/messages/{key}", "POST /v1/queues/{queue}/messages"}
EXPIRING: set[tuple[str, str]] = set()


def _expires(case: Any) -> bool:
    body = case.body
    return isinstance(body, dict) and any(
        body.get(field) is not None for field in ("ttl", "expires_at")
    )


def _problem(content: bytes) -> dict[str, Any]:
    try:
        problem = json.loads(content)
    except ValueError:
        return {}
    return problem if isinstance(problem, dict) else {}


def _foreseen(operation: str, status: int, content: bytes) -> bool:
    problem = _problem(content)
    kind = str(problem.get("type", "")).rpartition(":")[2]
    detail = str(problem.get("detail", ""))
    return any(
        status == expected and kind == slug and words in detail
        for expected, slug, words in FORESEEN.get(operation, [])
    )


@schemathesis.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but a foreseen refusal of a schema-valid request, and the
    methods a cron entry's path takes where it overlaps another path (ENTRY_PATHS)."""
    overlapping = (UnsupportedMethodResponse, AllowHeaderMismatch)
    if isinstance(failure, overlapping) and case.operation.path in ENTRY_PATHS:
        return False
    parameters = case.path_parameters or {}
    if isinstance(failure, EnsureResourceAvailability) and (
        (parameters.get("queue"), parameters.get("key")) in EXPIRING
    ):
        return False
    return not (
        isinstance(failure, RejectedPositiveData)
        and _foreseen(case.operation.label, response.status_code, response.content)
    )


@schemathesis.hook
def before_call(context: Any, case: Any, kwargs: Any) -> None:
    """Shorten a poll's valid `wait` (an invalid one is sent as it is)."""
    if case.operation.label != POLL or not isinstance(case.body, dict):
        return
    wait = case.body.get("wait")
    if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 < wait <= 20:
        case.body["wait"] = min(wait, SHORTEST_WAIT)


@schemathesis.hook
def after_call(context: Any, case: Any, response: Any) -> None:
    """Note the messages offered with an expiry (EXPIRING)."""
    if case.operation.label not in OFFERS or not _expires(case) or response.status_code >= 300:
        return
    try:
        answer = json.loads(response.content)
    except ValueError:
        return
    if isinstance(answer, dict):
        EXPIRING.add((answer.get("queue"), answer.get("key")))
