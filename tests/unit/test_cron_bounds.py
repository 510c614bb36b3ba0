"""How many runs a cron entry keeps, and which of its stored runs go (app/cron/bounds.py, app/domain/cron.py)."""

from __future__ import annotations

import pytest

from app.cron.bounds import MAX_RUN_BYTES_PER_ENTRY, MAX_RUNS_PER_ENTRY, runs_allowed
from app.domain.cron import kept_run_count, runs_to_install


@pytest.mark.parametrize(
    ("payload_bytes", "allowed"),
    [
        (1, MAX_RUNS_PER_ENTRY),
        (20_000, MAX_RUNS_PER_ENTRY),
        (128 * 1024, 32),  # 4 MiB: an `every: 1` entry of 128 KiB keeps 32 runs, not ~1,060
        (256 * 1024, 16),
        (MAX_RUN_BYTES_PER_ENTRY, 1),
        (16 * 1024 * 1024, 1),  # a payload larger than the bound still runs
    ],
)
def test_runs_allowed_by_count_and_bytes_and_never_none(payload_bytes, allowed):
    assert runs_allowed(payload_bytes) == allowed
    assert runs_allowed(payload_bytes) * payload_bytes <= max(
        MAX_RUN_BYTES_PER_ENTRY, payload_bytes
    )


def _keys(*minutes: int) -> list[str]:
    """Run keys of one configuration, at these minutes past 09:00 (key order is time order)."""
    return [f"tick/0123456789abcdef/20261126-09{minute:02d}00.000" for minute in minutes]


NOW = _keys(30)[0]  # 09:30


def test_runs_within_the_limit_and_the_lookahead_all_stay():
    stored = _keys(10, 20, 31, 32, 33)
    assert kept_run_count(stored, 5, due_until=NOW, keep_until=_keys(59)[0]) == 5


def test_the_latest_runs_ahead_go_past_the_limit():
    stored = _keys(31, 32, 33, 34, 35, 36)
    assert kept_run_count(stored, 4, due_until=NOW, keep_until=_keys(59)[0]) == 4


def test_runs_after_the_lookahead_go_even_within_the_limit():
    stored = _keys(29, 31, 40, 50)
    assert kept_run_count(stored, 10, due_until=NOW, keep_until=_keys(40)[0]) == 3


def test_a_run_that_is_due_stays_however_many_wait():
    stored = _keys(1, 2, 3, 4, 5, 6, 31, 32)
    # Six due, limit 4: the due ones stay, every run ahead goes.
    assert kept_run_count(stored, 4, due_until=NOW, keep_until=_keys(59)[0]) == 6
    # Due at the very instant counts as due.
    assert kept_run_count(_keys(30, 31), 1, due_until=NOW, keep_until=_keys(59)[0]) == 1


def test_nothing_stored_keeps_nothing():
    assert kept_run_count([], 3, due_until=NOW, keep_until=_keys(59)[0]) == 0


def test_runs_to_install_skips_the_stored_and_fills_the_room():
    stored = _keys(31, 33)
    candidates = _keys(31, 32, 33, 34, 35)
    assert runs_to_install(stored, candidates, 2) == _keys(32, 34)
    assert runs_to_install(stored, candidates, 0) == []
    assert runs_to_install(stored, candidates, -3) == []
