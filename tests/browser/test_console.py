"""The web console (docs/guide/console.md) in headless Chromium against a real
`hourglass serve`, on SQLite and PostgreSQL: what it shows equals what the API says, its
actions ask first and do what they say, keys and payloads stay text, tokens and their
queues hold, and a database that goes away is shown, then forgotten once it is back."""

from __future__ import annotations

import json
from fnmatch import fnmatchcase

import pytest

from tests.browser.pages import NOBODYS_TOKEN, TEAM_GLOB, TEAM_TOKEN, Console, message_path

# What the page alone decides (text never read as HTML, confirmations, forms, tokens) is
# the same on every database, whose side the contract suite covers: one is enough. The
# rest runs on both (the `service` fixture's params).
PAGE_ONLY = pytest.mark.parametrize("service", ["sqlite"], indirect=True)

# Keys that a console putting user data into HTML would run as script.
IMAGE_KEY = "<img src=x onerror=alert(1)>"
SCRIPT_KEY = "</script><script>window.__pwned=1</script>"
HOSTILE_PAYLOAD = {"html": IMAGE_KEY, "script": SCRIPT_KEY, "note": "<b>not bold</b>"}
# Far in the future, and its runs never come due while the tests run.
YEARLY = "0 3 1 1 *"


def _overview_numbers(console: Console) -> dict[str, dict[str, str]]:
    return console.table("#queues table", "data-queue")


def _messages_shown(console: Console, queue: str) -> str | None:
    """The overview's count of `queue`'s messages; None while it has no row."""
    return _overview_numbers(console).get(queue, {}).get("messages")


def _expected_numbers(console: Console) -> dict[str, dict[str, str]]:
    """The overview's columns as the API gives them (the age of the oldest ready message
    only as there or not: it moves with the clock)."""
    queues = console.service.api.get("/v1/queues").json()["queues"]
    counts = {stats["queue"]: stats["messages"] for stats in queues}
    expected = {}
    for stats in queues:
        settings = console.service.api.get(f"/v1/queues/{stats['queue']}/settings").json()
        expected[stats["queue"]] = {
            "messages": f"{stats['messages']:,}",
            "ready": f"{stats['ready']:,}",
            "scheduled": f"{stats['scheduled']:,}",
            "leased": f"{stats['leased']:,}",
            "oldest-ready": "—" if stats["oldest_ready_at"] is None else "an age",
            "dead-letters": f"{counts.get(settings['dead_letter_queue'], 0):,}",
        }
    return expected


def _shown_numbers(console: Console) -> dict[str, dict[str, str]]:
    shown = {}
    for queue, cells in _overview_numbers(console).items():
        numbers = {column: cells[column] for column in ("messages", "ready", "scheduled", "leased")}
        numbers["oldest-ready"] = "—" if cells["oldest-ready"] == "—" else "an age"
        numbers["dead-letters"] = cells["dead-letters"]
        shown[queue] = numbers
    return shown


def test_the_overview_shows_the_api_numbers(console, unique):
    service = console.service
    busy, failing = f"busy-{unique}", f"failing-{unique}"
    service.offer(busy, "leased", {"n": 0})
    assert len(service.poll(busy, lease=600)["messages"]) == 1
    service.offer(busy, "ready-1", {"n": 1})
    service.offer(busy, "ready-2", {"n": 2})
    service.offer(busy, "later", {"n": 3}, delay=3600)
    service.dead_letter(failing, ["broken"], {"n": 4})
    service.offer(failing, "later", {"n": 5}, delay=3600)

    console.open("/console")  # the redirect to /console/ on the way
    console.find(f'#queues tr[data-queue="{busy}"]')
    assert console.path() == "/console/"
    console.wait(
        lambda: _shown_numbers(console) == _expected_numbers(console),
        "the overview's numbers are not the API's",
    )
    shown = _overview_numbers(console)
    assert shown[busy] | {"oldest-ready": "…"} == {
        "queue": busy,
        "messages": "4",
        "ready": "2",
        "scheduled": "1",
        "leased": "1",
        "oldest-ready": "…",
        "dead-letters": "0",
    }
    assert shown[busy]["oldest-ready"].endswith(" s")
    assert shown[failing]["dead-letters"] == "1"
    tag = console.find(f'#queues tr[data-queue="{failing}.dead"] .tag')
    assert tag.text == f"dead letters of {failing}"


@PAGE_ONLY
def test_the_overview_refreshes_by_itself(console, unique):
    service = console.service
    queue = f"live-{unique}"
    service.offer(queue, "first", 1)
    console.open("/console/")
    console.wait(lambda: _messages_shown(console, queue) == "1", "the queue is not shown")
    for index in range(3):
        service.offer(queue, f"new-{index}", index)
    console.wait(lambda: _messages_shown(console, queue) == "4", "the overview did not refresh")


@PAGE_ONLY
def test_empty_states_say_so(console, unique):
    console.open("/console/", token=NOBODYS_TOKEN)
    assert console.text("#queues .empty") == (
        "No queues this token may use hold messages or cron entries."
    )
    console.open(f"/console/queues/empty-{unique}")
    assert console.loaded("#cron").text == "No cron entries."
    assert console.text('[data-count="messages"] .value') == "0"
    assert console.text('[data-count="oldest-ready"] .value') == "—"


def test_a_deep_link_to_a_key_with_slashes_and_spaces_loads_it(console, unique):
    service = console.service
    queue = f"deep-{unique}"
    key = "reports/2026 Q1/summary for ops"
    odd_key = "odd/100% sure?#yes & more"
    payload = {"rows": [1, 2, {"total": None}], "owner": "ops team", "ünï": "cödé"}
    service.offer(queue, key, payload, delay=600)
    service.offer(queue, odd_key, "just a string")

    console.open(message_path(queue, key))
    assert console.text("#message-key") == key
    assert json.loads(console.text("#payload-json")) == payload
    assert console.text('[data-fact="state"]') == "scheduled"
    assert console.text('[data-fact="deliveries"]') == "0"
    message = service.api.get(
        f"/v1/queues/{queue}/messages/reports%2F2026%20Q1%2Fsummary%20for%20ops"
    )
    scheduled_at = message.json()["scheduled_at"]
    assert console.text('[data-fact="scheduled-at"]').startswith(
        f"{scheduled_at[:10]} {scheduled_at[11:19]} UTC (in "
    )
    assert console.text("#crumbs .here") == key

    # The same key with its slashes as they are: the rest of the address is the key.
    console.open(f"/console/queues/{queue}/messages/reports/2026%20Q1/summary%20for%20ops")
    assert console.text("#message-key") == key

    console.open(message_path(queue, odd_key))
    assert console.text("#message-key") == odd_key
    assert console.text("#payload-json") == '"just a string"'

    # A key nothing holds: said plainly.
    console.expect_api_errors(404)
    console.open(message_path(queue, "no/such key"))
    assert console.text("#missing h2") == "No such message"
    assert console.text("#message-key") == "no/such key"


@PAGE_ONLY
def test_deleting_a_message_asks_first(console, unique):
    service = console.service
    queue = f"delete-{unique}"
    key = "user/42/friday reminder"
    service.offer(queue, key, {"remind": 42})
    service.offer(queue, "stays", 1)

    console.open(message_path(queue, key))
    console.click("#delete-message")
    assert key in console.answer_dialog(confirm=False)
    assert service.message_status(queue, key) == 200

    console.click("#delete-message")
    console.answer_dialog(confirm=True)
    console.wait_for_text(".notice", f"Deleted the message “{key}”.")
    assert console.path() == f"/console/queues/{queue}"
    assert service.message_status(queue, key) == 404
    assert service.stats(queue)["messages"] == 1
    console.wait_for_text('[data-count="messages"] .value', "1", exact=True)


def test_redrive_sends_dead_letters_back(console, unique):
    service = console.service
    queue = f"redrive-{unique}"
    service.dead_letter(queue, ["a/1", "a/2"], {"try": "again"})
    assert service.stats(f"{queue}.dead")["messages"] == 2

    console.open(f"/console/queues/{queue}.dead")
    console.click("#redrive-button")
    assert "Redrive" in console.answer_dialog(confirm=True)
    console.wait_for_text(".notice", "Redrive: moved 2.")
    assert service.stats(f"{queue}.dead")["messages"] == 0
    assert service.stats(queue)["ready"] == 2
    console.wait_for_text('[data-count="messages"] .value', "0", exact=True)


def test_a_queue_is_paused_after_a_confirmation_and_resumed_from_its_banner(console, unique):
    service = console.service
    queue = f"pause-{unique}"
    service.offer(queue, "k", 1)

    console.open(f"/console/queues/{queue}")
    console.click("#pause-button")
    assert "delivers nothing" in console.answer_dialog(confirm=False)
    assert service.stats(queue)["paused"] is False

    console.click("#pause-button")
    console.answer_dialog(confirm=True)
    console.wait_for_text("#pause.paused", "Paused since")
    assert service.stats(queue)["paused"] is True
    assert service.poll(queue)["messages"] == []
    console.open("/console/")
    console.wait_for_text(f'[data-queue="{queue}"] .badge.paused', "paused", exact=True)

    console.open(f"/console/queues/{queue}")
    console.click("#resume-button")
    console.wait_for_text("#pause-button", "Pause queue", exact=True)
    assert service.stats(queue)["paused"] is False
    assert [message["key"] for message in service.poll(queue)["messages"]] == ["k"]


def test_a_cron_entry_is_paused_and_resumed_from_its_row(console, unique):
    service = console.service
    queue = f"cron-pause-{unique}"
    installed = service.api.put(
        f"/v1/queues/{queue}/cron/tick", json={"payload": 1, "cron": YEARLY}
    )
    assert installed.status_code == 201, installed.text

    console.open(f"/console/queues/{queue}")
    console.click('#cron [data-name="tick"] button[data-action="pause"]')
    assert "installs no runs" in console.answer_dialog(confirm=True)
    console.wait_for_text('#cron [data-name="tick"] .badge.paused', "paused", exact=True)
    assert service.api.get(f"/v1/queues/{queue}/cron/tick").json()["paused"] is True
    assert service.stats(queue)["messages"] == 0  # its pending run went

    console.click('#cron [data-name="tick"] button[data-action="resume"]')
    console.wait_for_text(
        '#cron [data-name="tick"] button[data-action="pause"]', "Pause", exact=True
    )
    assert service.api.get(f"/v1/queues/{queue}/cron/tick").json()["paused"] is False
    assert service.stats(queue)["messages"] == 1


@PAGE_ONLY
def test_purge_waits_for_the_queue_name_typed_exactly(console, unique):
    service = console.service
    queue = f"purge-{unique}"
    for index in range(3):
        service.offer(queue, f"k{index}", index)

    console.open(f"/console/queues/{queue}")
    button = console.find("#purge-button")
    assert not button.is_enabled()
    for almost in (queue[:-1], f"{queue}x", queue.upper(), f" {queue}"):
        console.type_into('input[name="confirm"]', almost)
        assert not button.is_enabled(), almost
    # Enter in the field with a wrong name does not purge either (had it, the purge
    # below would find nothing left to delete).
    console.type_into('input[name="confirm"]', f"{queue[:-1]}\n")

    console.type_into('input[name="confirm"]', queue)
    assert button.is_enabled()
    button.click()
    console.wait_for_text("#purge-status", "Purged: 3 messages deleted.")
    assert service.stats(queue)["messages"] == 0
    console.wait_for_text('[data-count="messages"] .value', "0", exact=True)


@PAGE_ONLY
def test_settings_are_changed_after_a_confirmation(console, unique):
    service = console.service
    queue = f"settings-{unique}"
    service.offer(queue, "k", 1)
    retry = {"initial_delay": 5.0, "max_delay": 300.0, "multiplier": 3.0, "jitter": 0.25}
    assert service.api.put(f"/v1/queues/{queue}/settings", json={"retry": retry}).status_code == 200

    console.open(f"/console/queues/{queue}")
    assert console.text("#dead-letter-queue") == f"dead letters go to {queue}.dead"
    # The form shows the retry policy it will send back: saving other fields keeps it.
    assert console.find('input[name="retry_multiplier"]').get_attribute("value") == "3"
    console.type_into('input[name="max_deliveries"]', "4")
    console.type_into('input[name="dead_letter_queue"]', f"{queue}-graveyard")
    console.type_into('input[name="default_lease"]', "90")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=False)
    assert service.api.get(f"/v1/queues/{queue}/settings").json()["max_deliveries"] is None

    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait_for_text("#settings-status", "Saved at")
    settings = service.api.get(f"/v1/queues/{queue}/settings").json()
    assert settings | {"updated_at": "…"} == {
        "queue": queue,
        "default_lease": 90.0,
        "max_deliveries": 4,
        "dead_letter_queue": f"{queue}-graveyard",
        "retry": retry,
        "push": None,
        "group_concurrency": 1,
        "max_leased": None,
        "rate": None,
        "updated_at": "…",
    }
    console.wait_for_text("#dead-letter-queue", f"{queue}-graveyard")

    # A new policy typed in; both delays emptied, none.
    console.type_into('input[name="retry_initial_delay"]', "2")
    console.type_into('input[name="retry_max_delay"]', "60")
    console.type_into('input[name="retry_jitter"]', "0")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait(
        lambda: (
            service.api.get(f"/v1/queues/{queue}/settings").json()["retry"]
            == {"initial_delay": 2.0, "max_delay": 60.0, "multiplier": 3.0, "jitter": 0.0}
        ),
        "the new retry policy",
    )
    console.type_into('input[name="retry_initial_delay"]', "")
    console.type_into('input[name="retry_max_delay"]', "")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait(
        lambda: service.api.get(f"/v1/queues/{queue}/settings").json()["retry"] is None,
        "no retry policy",
    )


@PAGE_ONLY
def test_a_queues_push_target_is_shown_and_kept(console, unique):
    service = console.service
    queue = f"push-{unique}"  # no messages: nothing is pushed to the target nobody serves
    push = {"url": "http://127.0.0.1:9/hooks/reminders", "timeout": 5.0, "concurrency": 2}
    answer = service.api.put(f"/v1/queues/{queue}/settings", json={"push": push})
    assert answer.status_code == 200, answer.text

    console.open(f"/console/queues/{queue}")
    console.wait_for_text(
        "#push-target", "pushed to http://127.0.0.1:9/hooks/reminders (2 at once, 5 s timeout)"
    )
    assert console.find('input[name="push_url"]').get_attribute("value") == push["url"]
    assert console.find('input[name="push_concurrency"]').get_attribute("value") == "2"
    # Saving another field keeps the target (a PUT replaces every setting).
    console.type_into('input[name="max_deliveries"]', "7")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait_for_text("#settings-status", "Saved at")
    settings = service.api.get(f"/v1/queues/{queue}/settings").json()
    assert (settings["max_deliveries"], settings["push"]) == (7, push)

    # A target outside HOURGLASS_PUSH_ALLOWED: the service's 422 is shown, nothing changes.
    console.expect_api_errors(422)
    console.type_into('input[name="push_url"]', "http://127.0.0.1:9/elsewhere")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait_for_text("#settings-status", "HOURGLASS_PUSH_ALLOWED")
    assert service.api.get(f"/v1/queues/{queue}/settings").json()["push"] == push

    # The URL emptied: no push.
    console.type_into('input[name="push_url"]', "")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait(
        lambda: service.api.get(f"/v1/queues/{queue}/settings").json()["push"] is None,
        "no push target",
    )
    console.wait(
        lambda: (
            console.driver.execute_script(
                "return document.querySelector('#push-target').textContent"
            )
            == ""
        ),
        "no push line",
    )


@PAGE_ONLY
def test_a_queues_group_concurrency_is_shown_and_changed(console, unique):
    service = console.service
    queue = f"group-settings-{unique}"
    service.configure(queue, group_concurrency=3, max_deliveries=9)

    console.open(f"/console/queues/{queue}")
    assert console.find('input[name="group_concurrency"]').get_attribute("value") == "3"
    console.type_into('input[name="group_concurrency"]', "5")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait_for_text("#settings-status", "Saved at")
    settings = service.api.get(f"/v1/queues/{queue}/settings").json()
    assert (settings["group_concurrency"], settings["max_deliveries"]) == (5, 9)

    # Emptied: the default, one at a time; the form shows what applies.
    console.type_into('input[name="group_concurrency"]', "")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait(
        lambda: service.api.get(f"/v1/queues/{queue}/settings").json()["group_concurrency"] == 1,
        "the default group concurrency",
    )
    console.wait(
        lambda: console.find('input[name="group_concurrency"]').get_attribute("value") == "1",
        "the form shows 1",
    )


def _no_script_ran(console: Console) -> None:
    assert console.driver.execute_script("return window.__pwned") is None
    assert not console.alert_shown()
    assert console.find_all("img[src='x']") == []


@PAGE_ONLY
def test_keys_payloads_and_names_are_shown_as_text(console, unique):
    service = console.service
    queue = f"xss-{unique}"
    for key in (IMAGE_KEY, SCRIPT_KEY):
        service.offer(queue, key, HOSTILE_PAYLOAD)
    installed = service.api.put(
        f"/v1/queues/{queue}/cron/{IMAGE_KEY.replace('/', '%2F')}",
        json={"payload": HOSTILE_PAYLOAD, "cron": YEARLY},
    )
    assert installed.status_code == 201, installed.text

    for key in (IMAGE_KEY, SCRIPT_KEY):
        console.open(message_path(queue, key))
        assert console.text("#message-key") == key
        assert console.text("#crumbs .here") == key
        assert json.loads(console.text("#payload-json")) == HOSTILE_PAYLOAD
        assert SCRIPT_KEY in console.text("#payload-json")
        _no_script_ran(console)

    console.open(f"/console/queues/{queue}")
    row = console.find("#cron tbody tr")
    assert row.get_attribute("data-name") == IMAGE_KEY
    assert console.text('#cron td[data-column="name"]') == IMAGE_KEY
    _no_script_ran(console)


@PAGE_ONLY
def test_keys_in_the_message_list_and_history_are_text(console, unique):
    service = console.service
    queue = f"xss-list-{unique}"
    for key in (IMAGE_KEY, SCRIPT_KEY):
        service.offer(queue, key, HOSTILE_PAYLOAD)
    polled = service.poll(queue, max=1)
    assert service.api.delete(f"/v1/queues/{queue}/locks/{polled['lock_id']}").status_code == 204

    console.open(f"/console/queues/{queue}")
    console.loaded("#messages")
    console.loaded("#history")
    listed = [cell.text for cell in console.find_all('#messages td[data-column="key"]')]
    finished = [cell.text for cell in console.find_all('#history td[data-column="key"]')]
    assert sorted(listed + finished) == sorted([IMAGE_KEY, SCRIPT_KEY])
    _no_script_ran(console)


def _listed_keys(console: Console) -> list[str]:
    return [cell.text for cell in console.find_all('#messages td[data-column="key"]')]


def test_messages_are_searched_by_key_prefix_and_paged(console, unique):
    service = console.service
    queue = f"paging-{unique}"
    users = [f"user/{index:02}" for index in range(30)]
    orders = [f"order/{index}" for index in range(5)]
    batch = [{"key": key, "payload": key} for key in users + orders]
    assert service.api.post(f"/v1/queues/{queue}/batch", json={"messages": batch}).is_success
    leased = service.poll(queue, max=2, lease=600)["messages"]

    console.open(f"/console/queues/{queue}")
    console.loaded("#messages")
    console.wait(lambda: len(_listed_keys(console)) == 25, "the first page is not 25 messages")
    first = _listed_keys(console)
    console.click("#messages .pager button:last-child")
    console.wait(lambda: console.text("#page-number") == "Page 2", "no second page")
    second = _listed_keys(console)
    assert len(second) == 10
    assert sorted(first + second) == sorted(users + orders)  # each once, none missing
    assert not console.find("#messages .pager button:last-child").is_enabled()
    console.click("#messages .pager button:first-child")
    console.wait(lambda: _listed_keys(console) == first, "the first page did not come back")

    console.type_into('#messages input[name="prefix"]', "order/\n")
    console.wait(lambda: _listed_keys(console) == orders, "the prefix search")
    assert console.path() == f"/console/queues/{queue}?prefix=order%2F"

    console.type_into('#messages input[name="prefix"]', "")
    console.click('#messages [data-state="leased"]')
    expected = sorted(message["key"] for message in leased)
    console.wait(lambda: sorted(_listed_keys(console)) == expected, "the leased tab")

    console.type_into('#messages input[name="prefix"]', "nothing/\n")
    console.wait_for_text(
        "#messages .empty", "No leased messages with keys starting with “nothing/”."
    )

    # The search is in the address: a link to it shows the same.
    console.open(f"/console/queues/{queue}?prefix=order%2F3")
    console.wait(lambda: _listed_keys(console) == ["order/3"], "the prefix from the address")


@PAGE_ONLY
def test_a_message_is_deleted_from_the_list(console, unique):
    service = console.service
    queue = f"list-delete-{unique}"
    service.offer(queue, "goes", 1)
    service.offer(queue, "stays", 2)

    console.open(f"/console/queues/{queue}")
    console.loaded("#messages")
    row = console.find('#messages tr[data-key="goes"]')
    row.find_element("css selector", "button").click()
    console.answer_dialog(confirm=True)
    console.wait(lambda: _listed_keys(console) == ["stays"], "the message is still listed")
    assert service.message_status(queue, "goes") == 404


def test_the_message_table_and_page_show_each_message_s_priority(console, unique):
    service = console.service
    queue = f"priorities-{unique}"
    service.offer(queue, "urgent", 1, priority=9)
    service.offer(queue, "routine", 2)

    console.open(f"/console/queues/{queue}")
    console.loaded("#messages")
    rows = console.table("#messages table", "data-key")
    assert {key: row["priority"] for key, row in rows.items()} == {"urgent": "9", "routine": "0"}
    console.open(message_path(queue, "urgent"))
    assert console.text('[data-fact="priority"]') == "9"


def test_messages_show_their_group_and_are_filtered_by_it(console, unique):
    service = console.service
    queue = f"groups-{unique}"
    for key, group in (
        ("order/1", "customer/7"),
        ("order/2", "customer/7"),
        ("order/3", "customer/9"),
        ("plain", None),
    ):
        service.offer(queue, key, key, group=group)

    console.open(f"/console/queues/{queue}")
    console.loaded("#messages")
    rows = console.table("#messages table", "data-key")
    assert {key: row["group"] for key, row in rows.items()} == {
        "order/1": "customer/7",
        "order/2": "customer/7",
        "order/3": "customer/9",
        "plain": "—",
    }

    console.type_into('#messages input[name="group"]', "customer/7\n")
    console.wait(lambda: _listed_keys(console) == ["order/1", "order/2"], "the group filter")
    assert console.path() == f"/console/queues/{queue}?group=customer%2F7"
    # With a key prefix too, and on a state's tab: both apply.
    console.type_into('#messages input[name="prefix"]', "order/2")
    console.click('#messages [data-state="ready"]')
    console.wait(lambda: _listed_keys(console) == ["order/2"], "the group and the prefix")
    console.type_into('#messages input[name="prefix"]', "")
    console.type_into('#messages input[name="group"]', "nobody\n")
    console.wait_for_text("#messages .empty", "No ready messages in group “nobody”.")

    # A group in the list filters by it.
    console.type_into('#messages input[name="group"]', "\n")
    console.click('#messages [data-state="all"]')
    console.wait(lambda: len(_listed_keys(console)) == 4, "every message again")
    console.click('#messages tr[data-key="order/3"] button.group')
    console.wait(lambda: _listed_keys(console) == ["order/3"], "the group clicked")
    assert console.find('#messages input[name="group"]').get_attribute("value") == "customer/9"

    # The message shows its group, a link to the group's list.
    console.open(message_path(queue, "order/1"))
    assert console.text('[data-fact="group"]') == "customer/7"
    console.click('[data-fact="group"] a')
    console.wait(lambda: _listed_keys(console) == ["order/1", "order/2"], "the group's list")
    assert console.path() == f"/console/queues/{queue}?group=customer%2F7"
    console.open(message_path(queue, "plain"))
    assert console.text('[data-fact="group"]') == "—"


def test_messages_show_their_expiry_and_expired_dead_letters_are_marked(console, unique):
    service = console.service
    queue, dead = f"expiry-{unique}", f"expiry-{unique}.dead"
    # A dead letter of its deliveries first (this leaves max_deliveries at 1: a queue
    # with a delivery limit dead-letters what expires too, to `{queue}.dead`).
    service.dead_letter(queue, ["tired"], {"n": 0})
    service.offer(queue, "later", {"n": 1}, delay=600, ttl=7230)  # due in 10 min, then 2 h
    service.offer(queue, "plain", {"n": 2}, delay=600)
    service.offer(queue, "gone", {"n": 3}, expires_at="2026-01-01T00:00:00Z")  # long past
    console.wait(lambda: service.message_status(dead, "gone") == 200, "the expiry sweep")
    stored = service.api.get(f"/v1/queues/{queue}/messages/later").json()["expires_at"]

    console.open(f"/console/queues/{queue}")
    console.loaded("#messages")
    rows = console.table("#messages table", "data-key")
    assert {key: row["expires"] for key, row in rows.items()} == {
        "later": "in 2 h 10 min",
        "plain": "—",
    }
    shown = console.find('#messages tr[data-key="later"] td[data-column="expires"] time')
    assert shown.get_attribute("datetime") == stored
    # The history offers the outcome, and shows where the expired message went.
    console.loaded("#history")
    assert "expired" in console.text("#history select")
    console.click('#history select option[value="expired"]')
    console.wait(
        lambda: list(console.table("#history table", "data-key")) == ["gone"], "expired only"
    )
    assert console.table("#history table", "data-key")["gone"]["outcome"] == "expired"

    # In the dead-letter queue, the one that expired is marked; the one that ran out of
    # deliveries is not.
    console.open(f"/console/queues/{dead}")
    console.loaded("#messages")
    rows = console.table("#messages table", "data-key")
    assert {key: row["expires"] for key, row in rows.items()} == {"gone": "expired", "tired": "—"}

    console.open(message_path(queue, "later"))
    assert console.text('[data-fact="expires-at"]').startswith(stored[:10])
    assert "(in 2 h 10 min)" in console.text('[data-fact="expires-at"]')
    console.open(message_path(queue, "plain"))
    assert console.text('[data-fact="expires-at"]') == "never"
    console.open(message_path(dead, "gone"))
    assert console.text('[data-fact="dead-lettered-from"]') == f"{queue} expired"
    assert console.text('[data-fact="expires-at"]') == "never"  # a dead letter does not expire
    console.open(message_path(dead, "tired"))
    assert console.text('[data-fact="dead-lettered-from"]') == queue


def test_a_message_page_shows_its_traceparent(console, unique):
    service = console.service
    queue = f"traced-{unique}"
    parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    response = service.api.put(
        f"/v1/queues/{queue}/messages/traced",
        json={"payload": 1},
        headers={"traceparent": parent, "tracestate": "rojo=1"},
    )
    assert response.status_code == 201, response.text
    service.offer(queue, "plain", 2)
    console.open(message_path(queue, "traced"))
    assert console.text('[data-fact="trace"]') == parent
    console.open(message_path(queue, "plain"))
    assert console.text('[data-fact="trace"]') == "—"


def test_a_message_page_shows_its_history(console, unique):
    service = console.service
    queue = f"history-{unique}"
    key = "invoice/7 march"
    service.offer(queue, key, {"invoice": 7})
    polled = service.poll(queue)
    assert service.api.delete(f"/v1/queues/{queue}/locks/{polled['lock_id']}").status_code == 204

    console.expect_api_errors(404)  # the message itself is gone
    console.open(message_path(queue, key))
    console.find("#missing")
    console.loaded("#history")
    rows = console.table("#history table", "data-key")
    assert list(rows) == [key]
    assert rows[key]["outcome"] == "acknowledged"
    assert rows[key]["deliveries"] == "1"


@PAGE_ONLY
def test_a_team_token_sees_only_its_queues(console, unique):
    service = console.service
    mine, also_mine, theirs = f"team-{unique}-a", f"team-{unique}-b", f"other-{unique}"
    service.offer(mine, "k", 1)
    service.offer(also_mine, "k", 2)
    service.offer(theirs, "secret/plans", 3)
    console.expect_api_errors(401, 403)

    console.open("/console/", token=None)
    console.find("#token-form")
    assert console.text("#token h1") == "This service needs an API token"
    console.type_into("#token-input", "not-a-token\n")
    console.wait_for_text("#token-error", "The service refused that token.")

    console.type_into("#token-input", f"{TEAM_TOKEN}\n")
    console.find(f'#queues tr[data-queue="{mine}"]')
    shown = _overview_numbers(console)
    assert {mine, also_mine} <= set(shown)
    assert all(fnmatchcase(queue, TEAM_GLOB) for queue in shown), sorted(shown)
    assert console.driver.execute_script("return sessionStorage.getItem('hourglass.token')") == (
        TEAM_TOKEN
    )

    # Another team's message, by a link: a clear refusal, and nothing of it shown.
    console.driver.get(f"{service.url}{message_path(theirs, 'secret/plans')}")
    console.wait_for_text(".state h1", "Forbidden")
    assert theirs in console.text(".state")
    assert console.find_all("#payload-json") == []

    console.driver.get(f"{service.url}/console/queues/{theirs}")
    console.wait_for_text(".state h1", "Forbidden")

    # Forgetting the token asks for one again.
    console.driver.get(f"{service.url}/console/")
    console.click("#forget-token")
    console.find("#token-form")


@pytest.mark.parametrize("service", ["postgresql"], indirect=True)
def test_the_database_going_away_is_shown_then_forgotten(console, unique):
    service = console.service
    queue = f"outage-{unique}"
    service.offer(queue, "before", 1)
    console.expect_api_errors(503)

    console.open("/console/")
    console.wait(lambda: _messages_shown(console, queue) == "1", "no queue shown")
    assert console.is_hidden("#banner")

    service.proxy.cut()
    try:
        console.wait_for_text("#banner", "Database unavailable.")
        # What it last read stays, under the banner.
        assert _messages_shown(console, queue) == "1"
    finally:
        service.proxy.restore()

    def offered() -> bool:
        response = service.api.put(f"/v1/queues/{queue}/messages/after", json={"payload": 2})
        return response.status_code == 201

    console.wait(offered, "the service did not recover")
    console.wait(lambda: _messages_shown(console, queue) == "2", "no recovery shown")
    console.wait(lambda: console.is_hidden("#banner"), "the banner stays")

    # A page first opened while the database is away says so, then shows itself.
    service.proxy.cut()
    try:
        console.open(f"/console/queues/{queue}")
        console.wait_for_text(".state h1", "Database unavailable")
    finally:
        service.proxy.restore()
    console.wait_for_text('[data-count="messages"] .value', "2", exact=True)


@PAGE_ONLY
def test_a_queues_limits_are_shown_kept_and_changed(console, unique):
    service = console.service
    queue = f"limits-{unique}"
    limits = {"max_leased": 5, "rate": {"limit": 20, "period": 1.5}}
    answer = service.api.put(f"/v1/queues/{queue}/settings", json=limits)
    assert answer.status_code == 200, answer.text

    console.open(f"/console/queues/{queue}")
    console.wait(
        lambda: console.find('input[name="max_leased"]').get_attribute("value") == "5",
        "the limits shown",
    )
    assert console.find('input[name="rate_limit"]').get_attribute("value") == "20"
    assert console.find('input[name="rate_period"]').get_attribute("value") == "1.5"
    # Saving another field keeps them (a PUT replaces every setting).
    console.type_into('input[name="max_deliveries"]', "7")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait_for_text("#settings-status", "Saved at")
    settings = service.api.get(f"/v1/queues/{queue}/settings").json()
    assert (settings["max_deliveries"], settings["max_leased"], settings["rate"]) == (
        7,
        5,
        limits["rate"],
    )

    # Changed, then emptied: no bound.
    console.type_into('input[name="max_leased"]', "2")
    console.type_into('input[name="rate_limit"]', "3")
    console.type_into('input[name="rate_period"]', "")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait(
        lambda: (
            (settings := service.api.get(f"/v1/queues/{queue}/settings").json())["max_leased"] == 2
            and settings["rate"] == {"limit": 3, "period": 1.0}
        ),
        "the new limits",
    )
    console.type_into('input[name="max_leased"]', "")
    console.type_into('input[name="rate_limit"]', "")
    console.click('#settings button[type="submit"]')
    console.answer_dialog(confirm=True)
    console.wait(
        lambda: (
            (settings := service.api.get(f"/v1/queues/{queue}/settings").json())["max_leased"]
            is None
            and settings["rate"] is None
        ),
        "no limits",
    )
