"""Screenshots of the console as a person sees it, at 1280×800: the queues, a queue, a
message, a paused queue, a queue's messages of one group and a queue whose messages
expire, with realistic data. Written to HOURGLASS_SCREENSHOTS when set (docs/guide/console.md and
docs/guide/flow-control.md show those in docs/console/), else to a temporary folder."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest

from app.domain.formats import format_timestamp
from tests.browser.conftest import VIEWPORT
from tests.browser.pages import Console, Service, message_path
from tests.conftest import truncate_all


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


def _seed(service: Service) -> None:
    """A few queues as a small product would have them: reminders (some leased, a cron
    entry, some history), emails with dead letters, invoices made by cron."""
    service.configure("reminders", default_lease=120, max_deliveries=5)
    for key, user in (("user/4711/renewal", 4711), ("user/5120/welcome-back", 5120)):
        service.offer("reminders", key, {"user": user, "template": key.split("/")[-1]})
    service.poll("reminders", max=2, lease=600)
    service.offer("reminders", "user/777/welcome", {"user": 777, "template": "welcome"})
    done = service.poll("reminders")
    assert service.api.delete(f"/v1/queues/reminders/locks/{done['lock_id']}").status_code == 204
    service.offer("reminders", "user/9/cancelled", {"user": 9})
    assert service.api.delete("/v1/queues/reminders/messages/user%2F9%2Fcancelled").is_success
    for key, delay in (
        ("user/3321/password-expiry", 0),
        ("user/0815/friday-standup", 0),
        ("user/2210/weekly-digest", 30 * 60),
        ("user/1187/invoice-due", 5 * 3600),
        ("user/1042/trial-ends", 2 * 86400),
    ):
        user = int(key.split("/")[1])
        payload = {
            "user": user,
            "template": key.split("/")[-1],
            "locale": "en-GB",
            "channels": ["email", "push"],
            "data": {"plan": "team", "seats": 12, "trial_ends_on": "2026-11-28"},
        }
        # The trial's reminder was offered inside a trace (docs/guide/messages.md).
        trace = {"traceparent": f"00-4bf92f3577b34da6a3ce929d0e0e{user:04d}-00f067aa0ba902b7-01"}
        service.offer("reminders", key, payload, headers=trace, delay=delay)
    cron = {"payload": {"kind": "digest", "audience": "all"}, "cron": "0 6 * * *"}
    installed = service.api.put(
        "/v1/queues/reminders/cron/nightly%2Fdigest", json={**cron, "timezone": "Europe/Berlin"}
    )
    assert installed.status_code == 201, installed.text

    service.dead_letter("emails", ["order/1187/receipt", "order/1203/receipt"], {"order": 1187})
    service.configure("emails", max_deliveries=5)
    for number in range(1204, 1210):
        service.offer("emails", f"order/{number}/receipt", {"order": number}, delay=number - 1200)

    monthly = {"payload": {"run": "month-end"}, "cron": "0 2 1 * *", "timezone": "UTC"}
    installed = service.api.put("/v1/queues/billing.invoices/cron/monthly%2Fclose", json=monthly)
    assert installed.status_code == 201, installed.text
    # The mail provider is down: the emails wait, paused, until it is back.
    assert service.api.post("/v1/queues/emails/pause").status_code == 200


@pytest.mark.parametrize("service", ["sqlite"], indirect=True)
def test_screenshots_of_the_queues_a_queue_and_a_message(console: Console, screenshots: Path):
    truncate_all(console.service.database_url)
    _seed(console.service)

    console.open("/console/")
    console.find('#queues tr[data-queue="billing.invoices"]')
    assert set(console.table("#queues table", "data-queue")) == {
        "billing.invoices",
        "emails",
        "emails.dead",
        "reminders",
    }
    console.screenshot(screenshots / "overview.png", VIEWPORT)

    console.open("/console/queues/reminders")
    for part in ("#messages", "#cron", "#history"):
        console.settled(part)
    console.screenshot(screenshots / "queue.png", VIEWPORT)

    console.open(message_path("reminders", "user/1042/trial-ends"))
    console.settled("#history")
    assert console.text("#message-key") == "user/1042/trial-ends"
    console.screenshot(screenshots / "message.png", VIEWPORT)

    console.open("/console/queues/emails")
    console.wait_for_text("#pause.paused", "Paused since")
    for part in ("#messages", "#cron", "#history"):
        console.settled(part)
    console.screenshot(screenshots / "paused.png", VIEWPORT)

    for name in ("overview.png", "queue.png", "message.png", "paused.png"):
        width, height = _png_size(screenshots / name)
        assert width == VIEWPORT["width"] and height >= VIEWPORT["height"], (name, width, height)


def _seed_groups(service: Service) -> None:
    """Reminders one at a time per customer (docs/guide/flow-control.md): each customer's
    earliest is leased, the next is due but waits its turn, the last is due later."""
    service.configure("reminders", default_lease=120, group_concurrency=1)
    for customer, templates in (
        (4711, ["trial-ends", "invoice-due", "renewal"]),
        (5120, ["welcome-back", "weekly-digest"]),
        (3321, ["password-expiry", "invoice-due", "survey"]),
    ):
        for turn, template in enumerate(templates):
            payload = {"customer": customer, "template": template, "locale": "en-GB"}
            key = f"customer/{customer}/{template}"
            group = f"customer/{customer}"
            delay = 0 if turn < 2 else 3600
            service.offer("reminders", key, payload, delay=delay, group=group)
    service.offer("reminders", "broadcast/maintenance", {"template": "maintenance"})
    leased = service.poll("reminders", max=10, lease=600)
    # One per customer, and the ungrouped one beside them.
    assert len(leased["messages"]) == 4, leased


@pytest.mark.parametrize("service", ["sqlite"], indirect=True)
def test_screenshot_of_a_queue_filtered_by_group(console: Console, screenshots: Path):
    truncate_all(console.service.database_url)
    _seed_groups(console.service)

    console.open("/console/queues/reminders?group=customer%2F4711")
    console.wait(
        lambda: len(console.find_all('#messages td[data-column="key"]')) == 3,
        "the group's three messages",
    )
    assert set(console.table("#messages table", "data-key")) == {
        "customer/4711/trial-ends",
        "customer/4711/invoice-due",
        "customer/4711/renewal",
    }
    for part in ("#cron", "#history"):
        console.settled(part)
    console.screenshot(screenshots / "groups.png", VIEWPORT)
    width, height = _png_size(screenshots / "groups.png")
    assert width == VIEWPORT["width"] and height >= VIEWPORT["height"], (width, height)


def _seed_expiry(service: Service) -> None:
    """Sale alerts, each useless once its sale ends (docs/guide/flow-control.md#expiry): the
    autumn clearance's ended (one alert acknowledged in time, the others expired to the
    dead letters), Black Friday's run for 15 more minutes (one leased), Cyber Monday's
    are due later, and the weekly digest never expires."""
    service.configure("sale-alerts", default_lease=120, max_deliveries=5)

    def alert(sale: str, user: int, **fields: object) -> None:
        payload = {"user": user, "sale": sale, "template": f"{sale}-starts", "locale": "en-GB"}
        service.offer("sale-alerts", f"sale/{sale}/user/{user}", payload, **fields)

    alert("autumn-clearance", 815, ttl=3600)
    sent = service.poll("sale-alerts", lease=60)
    assert service.api.delete(f"/v1/queues/sale-alerts/locks/{sent['lock_id']}").is_success
    # Three that were due two seconds ago and expired one second later: a waiting poll that
    # finds only them sweeps them to the dead letters itself, and then finds nothing.
    asked = format_timestamp(int(time.time() * 1000) - 2000)
    for user in (4711, 5120, 3321):
        alert("autumn-clearance", user, scheduled_at=asked, ttl=1)
    assert service.poll("sale-alerts", wait=1)["messages"] == []
    assert service.stats("sale-alerts.dead")["messages"] == 3

    alert("black-friday", 5120, ttl=900)
    assert len(service.poll("sale-alerts", lease=600)["messages"]) == 1
    for user in (4711, 1187):
        alert("black-friday", user, ttl=900)
    for user in (4711, 3321):
        # 30 s past the 12 h: the page reads "in 12 h" however long the seeding took.
        alert("cyber-monday", user, delay=6 * 3600 + 30, ttl=6 * 3600)
    service.offer(
        "sale-alerts",
        "digest/weekly/user/4711",
        {"user": 4711, "template": "weekly-digest", "locale": "en-GB"},
        delay=3 * 86400,
    )


@pytest.mark.parametrize("service", ["sqlite"], indirect=True)
def test_screenshot_of_a_queue_whose_messages_expire(console: Console, screenshots: Path):
    truncate_all(console.service.database_url)
    _seed_expiry(console.service)

    console.open("/console/queues/sale-alerts")
    console.loaded("#messages")
    expires = {
        key: row["expires"] for key, row in console.table("#messages table", "data-key").items()
    }
    assert expires["digest/weekly/user/4711"] == "—"
    assert expires["sale/cyber-monday/user/3321"] == "in 12 h", expires
    console.loaded("#history")
    outcomes = [row["outcome"] for row in console.table("#history table", "data-key").values()]
    assert sorted(outcomes) == ["acknowledged", "expired", "expired", "expired"]
    console.settled("#cron")
    console.screenshot(screenshots / "expiry.png", VIEWPORT)
    width, height = _png_size(screenshots / "expiry.png")
    assert width == VIEWPORT["width"] and height >= VIEWPORT["height"], (width, height)
