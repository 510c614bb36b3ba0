"""`hourglass pipeline report` on every database, against a history written with
known times (the service on a fake clock), read back through Spark's JDBC source."""

from __future__ import annotations

import datetime as dt
import io
import json
import re

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.pipeline import reports
from app.pipeline.report import NO_HISTORY, forecast_chart, lateness_chart, run_report
from tests.conftest import START_MS, FakeClock
from tests.support.helpers import poll, put

HOUR = dt.datetime.fromtimestamp(START_MS / 1000, dt.UTC).replace(tzinfo=None)  # 09:00 UTC


def _at(clock: FakeClock, seconds: float) -> None:
    clock.now = START_MS + round(seconds * 1000)


def _ack(client, queue: str, polled: dict) -> None:
    assert client.delete(f"/v1/queues/{queue}/locks/{polled['lock_id']}").status_code == 204


@pytest.fixture
def history(clean_database):
    """a: 2 s late, acked 3 s later; b: 4 s late, redelivered, acked 6 s after; c: dead
    letter of queue d after one delivery, 20 s late; e: deleted; f, g, h: still live."""
    clock = FakeClock()
    with TestClient(create_app(clean_database.settings(), clock=clock)) as client:
        client.put("/v1/queues/d/settings", json={"max_deliveries": 1})
        put(client, "q", "a", 1)
        put(client, "q", "b", 1, delay=10)
        put(client, "d", "c", 1)
        put(client, "q", "e", 1, delay=3600)
        put(client, "q", "f", 1, delay=2 * 3600)  # due 11:00
        put(client, "q", "g", 1, delay=10 * 86_400)  # beyond the forecast
        _at(clock, 1)
        assert client.delete("/v1/queues/q/messages/e").status_code == 204
        _at(clock, 2)
        a = poll(client, "q", lease=30)
        _at(clock, 5)
        _ack(client, "q", a)
        _at(clock, 14)
        assert poll(client, "q", lease=30)["messages"][0]["key"] == "b"
        _at(clock, 20)
        assert poll(client, "d", lease=30)["messages"][0]["key"] == "c"
        _at(clock, 44)
        b = poll(client, "q", lease=30)
        assert b["messages"][0]["deliveries"] == 2
        _at(clock, 50)
        _ack(client, "q", b)
        assert poll(client, "d")["messages"] == []  # c moves to d.dead
        put(client, "q", "h", 1)
        poll(client, "q", lease=600)  # h: leased, so not coming due
    return clean_database


def test_the_report_counts_what_finished_and_what_comes(spark, history, tmp_path):
    now = START_MS + 60_000
    summary = run_report(spark, database_url=history.url, output=str(tmp_path), now_ms=now, days=7)

    hourly = {
        row["queue"]: row.asDict() for row in spark.read.parquet(str(tmp_path / "hourly")).collect()
    }
    q = hourly["q"]
    assert q["hour"] == HOUR
    assert (q["finished"], q["deliveries"], q["redeliveries"]) == (3, 3, 1)
    assert (q["acknowledgements"], q["dead_letters"], q["dropped"]) == (2, 0, 1)
    assert (q["lateness_p50_s"], q["lateness_p95_s"], q["lateness_p99_s"]) == pytest.approx(
        (3.0, 3.9, 3.98)
    )
    assert (q["processing_p50_s"], q["processing_p95_s"]) == pytest.approx((4.5, 5.85))
    d = hourly["d"]
    assert (d["finished"], d["deliveries"], d["dead_letters"], d["lateness_p50_s"]) == (
        1,
        1,
        1,
        20.0,
    )
    assert d["processing_p50_s"] is None

    forecast = [row.asDict() for row in spark.read.parquet(str(tmp_path / "forecast")).collect()]
    assert forecast == [{"queue": "q", "hour": HOUR + dt.timedelta(hours=2), "coming_due": 1}]

    assert summary == json.loads((tmp_path / "summary.json").read_text())
    assert summary["history"]["rows"] == 4
    assert summary["queues"]["d.dead"]["ready_now"] == 1
    assert summary["queues"]["q"]["coming_due"] == 1
    assert summary["queues"]["q"]["finished"]["acknowledgements"] == 2
    for chart in ("lateness.png", "forecast.png"):
        data = (tmp_path / chart).read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 10_000


def test_hourly_groups_by_the_hour_messages_finished(spark):
    rows = [
        ("q", 0, 1_000, 1_000, 1, "acknowledged", 2_000),
        ("q", 0, 5_000, 9_000, 3, "acknowledged", 3_600_000 + 10_000),
        ("q", 0, None, None, 0, "dropped", 3_600_000 + 20_000),
        ("q", 0, None, None, 0, "expired", 3_600_000 + 30_000),
    ]
    history = spark.createDataFrame(
        rows,
        "queue string, scheduledAt long, firstDeliveredAt long, lastDeliveredAt long, "
        "deliveries int, outcome string, finishedAt long",
    )
    result = [row.asDict() for row in reports.hourly(history).collect()]
    assert [(row["hour"].hour, row["finished"], row["redeliveries"]) for row in result] == [
        (0, 1, 0),
        (1, 3, 2),
    ]
    assert (result[1]["dropped"], result[1]["expired"]) == (1, 1)
    assert result[1]["lateness_p50_s"] == 5.0  # the dropped and the expired never were delivered
    assert result[1]["processing_p50_s"] == pytest.approx(3601.0)


def _drawn_text(figure) -> list[str]:
    """Every text a chart shows, read from its SVG (glyphs kept as text)."""
    import matplotlib

    out = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        figure.savefig(out, format="svg")
    return re.findall(r"<text[^>]*>(.*?)</text>", out.getvalue(), re.DOTALL)


def test_a_report_over_no_history_says_so(spark, clean_database, tmp_path):
    summary = run_report(
        spark, database_url=clean_database.url, output=str(tmp_path), now_ms=START_MS, days=7
    )
    assert summary == json.loads((tmp_path / "summary.json").read_text())
    assert summary["history"] == {
        "rows": 0,
        "from": None,
        "to": None,
        "all_queues": None,
        "note": NO_HISTORY,
    }
    assert summary["queues"] == {}
    for chart in ("lateness.png", "forecast.png"):
        assert (tmp_path / chart).read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_empty_charts_say_so_in_words_without_axes():
    # Only the title and the words: no ticks (an empty time axis started in 1970).
    assert _drawn_text(lateness_chart([])) == [
        NO_HISTORY,
        "Lateness: first delivery minus the time asked for, all queues",
    ]
    assert _drawn_text(forecast_chart([], days=3)) == [
        "no messages coming due in the next 3 days",
        "Messages coming due per hour, all queues",
    ]


def test_a_chart_with_history_has_its_hours_and_no_note():
    row = {"hour": HOUR, "lateness_p50_s": 1.0, "lateness_p95_s": 2.0, "lateness_p99_s": 3.0}
    drawn = " ".join(_drawn_text(lateness_chart([row])))
    assert NO_HISTORY not in drawn and "1970" not in drawn
    assert "2026" in drawn and "seconds" in drawn
