"""Cron entries through both clients: installed, listed, read with their next runs, removed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from hourglass_client import CronEntry, NotFound


def test_cron_install_list_get_and_uninstall(api, queue):
    installed = api.install_cron(
        queue, "nightly/sales", {"report": "sales"}, daily=["02:00"], timezone="Europe/Bucharest"
    )
    assert installed.outcome == "created" and len(installed.next_runs) == 5
    assert all(run.tzinfo is UTC and run.hour in (0, 23) for run in installed.next_runs)
    assert (
        api.install_cron(
            queue,
            "nightly/sales",
            {"report": "sales"},
            daily=["02:00"],
            timezone="Europe/Bucharest",
        ).outcome
        == "unchanged"
    )
    api.install_cron(queue, "every-minute", None, every=timedelta(minutes=1))

    entries = api.cron_entries(queue)
    assert sorted(entry.name for entry in entries) == ["every-minute", "nightly/sales"]
    assert all(isinstance(entry, CronEntry) for entry in entries)
    after = datetime(2027, 3, 26, 12, tzinfo=UTC)
    entry = api.get_cron(queue, "nightly/sales", after=after, count=3)
    assert entry.daily == ["02:00"] and entry.config_hash == installed.config_hash
    assert [run.isoformat() for run in entry.next_runs] == [
        "2027-03-27T00:00:00+00:00",
        "2027-03-28T00:00:00+00:00",
        "2027-03-28T23:00:00+00:00",  # summer time (UTC+3) from 28 March, 04:00
    ]

    api.uninstall_cron(queue, "nightly/sales")
    with pytest.raises(NotFound):
        api.get_cron(queue, "nightly/sales")
    with pytest.raises(NotFound):
        api.uninstall_cron(queue, "nightly/sales")
