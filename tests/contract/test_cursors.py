"""Any cursor a list did not hand out is 404 over HTTP, whatever its nesting, size or
encoding, on every database and every list (app/domain/pages.py: decode_cursor)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, example, given, settings

from tests.contract.hostile_cursors import REPORTED, hostile_cursors

LISTS = [
    ("/v1/queues/q/messages", {}),
    ("/v1/queues/q/messages", {"prefix": "a"}),
    ("/v1/queues/q/history", {}),
]
# Python's own recursion limit, which the service runs under.
PYTHONS_RECURSION_LIMIT = 1000


@contextmanager
def pythons_recursion_limit() -> Iterator[None]:
    """Python's recursion limit while the requests run: hypothesis lifts it by 2,000 frames
    while it runs a test, and under that a cursor of ~990 `[` answered as the service would
    not (a 500 under Python's own limit)."""
    lifted = sys.getrecursionlimit()
    sys.setrecursionlimit(PYTHONS_RECURSION_LIMIT)
    try:
        yield
    finally:
        sys.setrecursionlimit(lifted)


# The client only reads, so one app for every example is as good as one each.
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(cursor=hostile_cursors)
@example(cursor=REPORTED)
def test_a_cursor_no_list_handed_out_is_404_on_every_list(client, cursor):
    assert 0 < len(cursor) <= 2048  # within the API's bound, so not a 422
    for path, query in LISTS:
        with pythons_recursion_limit():
            response = client.get(path, params={**query, "cursor": cursor})
        assert response.status_code == 404, (path, query, response.text)
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"] == "urn:hourglass:problem:cursor-not-found"
