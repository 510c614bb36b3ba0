"""Driving the console in Chromium: open a page with a token, wait for what it shows, act
as a person would, and read what the browser logged.

Selenium is imported here only, and leniently: without it the `chromium` fixture says so
(a loud skip, or a failure in CI) instead of the whole run stopping at collection.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

try:
    from selenium.common.exceptions import NoAlertPresentException, StaleElementReferenceException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement
    from selenium.webdriver.support.ui import WebDriverWait
except ImportError:  # reported by the `chromium` fixture, which every browser test uses
    WebDriver = WebElement = Any  # type: ignore[misc,assignment]

from tests.support.proxy import TcpProxy

# What HOURGLASS_API_TOKENS holds for every server here: a token for every queue, one for
# the team-* queues only, and one for queues no test makes.
ADMIN_TOKEN = "console-admin-token"
TEAM_TOKEN = "console-team-token"
TEAM_GLOB = "team-*"
NOBODYS_TOKEN = "console-nobodys-token"
NOBODYS_GLOB = "nobody-*"
# Seconds a condition may take: the overview refreshes every 2 s, and a database that
# came back is noticed by the pool within a few more.
WAIT_SECONDS = 15

# Inline script as an injection would bring it: an element, and an event handler (on an
# image that fails at once, from data: so that nothing is fetched). Each says it ran;
# the page's policy reports what it refused.
_INJECT = """
const seen = (window.__injection = { ran: [], refused: [] });
document.addEventListener("securitypolicyviolation", (event) => {
  seen.refused.push(event.effectiveDirective);
});
const script = document.createElement("script");
script.textContent = "window.__injection.ran.push('script element')";
document.body.append(script);
const image = document.createElement("img");
image.setAttribute("onerror", "window.__injection.ran.push('event handler')");
image.setAttribute("src", "data:,");
document.body.append(image);
"""
# How Chromium logs a refusal of inline script (an element or an event handler).
_INLINE_REFUSED = re.compile(r"inline (script|event handler)\b.*Content Security Policy")

_FAILED_LOAD = re.compile(
    r"^(?P<url>\S+) - Failed to load resource: the server responded with a status of (?P<status>\d+)"
)


@dataclass
class Service:
    """A running `hourglass serve` for the console: its address, the database behind it
    (through `proxy` for PostgreSQL, so a test can take it away), and an API client."""

    database: str
    url: str
    database_url: str
    proxy: TcpProxy | None
    api: httpx.Client

    def offer(
        self,
        queue: str,
        key: str,
        payload: Any = None,
        headers: dict[str, str] | None = None,
        **fields: Any,
    ) -> None:
        response = self.api.put(
            f"/v1/queues/{queue}/messages/{quote(key, safe='')}",
            json={"payload": payload, **fields},
            headers=headers,
        )
        assert response.status_code in (200, 201), response.text

    def poll(self, queue: str, **fields: Any) -> dict[str, Any]:
        response = self.api.post(f"/v1/queues/{queue}/poll", json=fields)
        assert response.status_code == 200, response.text
        return response.json()

    def configure(self, queue: str, **settings: Any) -> None:
        response = self.api.put(f"/v1/queues/{queue}/settings", json=settings)
        assert response.status_code == 200, response.text

    def dead_letter(self, queue: str, keys: list[str], payload: Any = None) -> None:
        """Offer `keys` to `queue` (which must hold no other ready message) and have them
        dead-lettered: one delivery allowed, given back, then found due again."""
        self.configure(queue, max_deliveries=1)
        for key in keys:
            self.offer(queue, key, payload)
        polled = self.poll(queue, max=len(keys))
        assert len(polled["messages"]) == len(keys), polled
        released = self.api.post(f"/v1/queues/{queue}/locks/{polled['lock_id']}/release", json={})
        assert released.status_code == 204, released.text
        assert self.poll(queue, max=len(keys))["messages"] == []  # moved, not delivered

    def stats(self, queue: str) -> dict[str, Any]:
        response = self.api.get(f"/v1/queues/{queue}")
        assert response.status_code == 200, response.text
        return response.json()

    def message_status(self, queue: str, key: str) -> int:
        return self.api.get(f"/v1/queues/{queue}/messages/{quote(key, safe='')}").status_code


class Console:
    """The console in the browser, against one service."""

    def __init__(self, driver: WebDriver, service: Service) -> None:
        self.driver = driver
        self.service = service
        # API statuses this test makes happen on purpose (a 401 before a token, a 404 for
        # a missing message, 503 while the database is away): not faults of the console.
        self.expected_statuses: set[int] = set()
        # Whether this test injects inline script, which the pages' policy refuses.
        self.refusals_expected = False

    def expect_api_errors(self, *statuses: int) -> None:
        self.expected_statuses.update(statuses)

    # -- going places ---------------------------------------------------------------------

    def open(self, path: str, token: str | None = ADMIN_TOKEN) -> None:
        """Load `path` fresh, as a person arriving with `token` already given (or none)."""
        # Session storage belongs to the origin: be on it before putting the token there
        # (on an address that is no page of the console's, so it asks the API nothing).
        if not self.driver.current_url.startswith(f"{self.service.url}/"):
            self.driver.get(f"{self.service.url}/console/no-page")
        if token is None:
            self.driver.execute_script("sessionStorage.clear()")
        else:
            self.driver.execute_script(
                "sessionStorage.setItem('hourglass.token', arguments[0])", token
            )
        self.driver.get(f"{self.service.url}{path}")

    def path(self) -> str:
        return self.driver.execute_script("return location.pathname + location.search")

    # -- waiting and reading ----------------------------------------------------------------

    def wait(self, condition: Callable[[], Any], message: str = "", seconds: float = WAIT_SECONDS):
        """Wait until `condition()` is truthy (a stale element counts as not yet)."""

        def holds(_driver: WebDriver) -> Any:
            try:
                return condition()
            except StaleElementReferenceException:
                return False

        return WebDriverWait(self.driver, seconds, poll_frequency=0.1).until(holds, message)

    def find(self, css: str) -> WebElement:
        return self.wait(lambda: self._visible(css), f"nothing visible matches {css!r}")

    def find_all(self, css: str) -> list[WebElement]:
        return self.driver.find_elements(By.CSS_SELECTOR, css)

    def _visible(self, css: str) -> WebElement | None:
        for element in self.driver.find_elements(By.CSS_SELECTOR, css):
            if element.is_displayed():
                return element
        return None

    def text(self, css: str) -> str:
        return self.find(css).text

    def wait_for_text(self, css: str, text: str, *, exact: bool = False) -> WebElement:
        """The first visible element matching `css` whose text contains `text` (or is it)."""

        def shown() -> WebElement | None:
            for element in self.driver.find_elements(By.CSS_SELECTOR, css):
                if element.is_displayed() and (
                    element.text == text if exact else text in element.text
                ):
                    return element
            return None

        return self.wait(shown, f"no visible {css!r} says {text!r}")

    def loaded(self, part: str) -> WebElement:
        """The body of the page's `part` (e.g. "#messages") once it has loaded: a table, or
        a sentence saying there is nothing; a part that could not load fails at once."""

        def settled() -> WebElement | None:
            body = self.driver.find_element(By.CSS_SELECTOR, f"{part} .section-body")
            if body.find_elements(By.CSS_SELECTOR, ".error"):
                raise AssertionError(f"{part} could not load: {body.text}")
            if body.find_elements(By.CSS_SELECTOR, "table, .empty"):
                return body
            return None

        return self.wait(lambda: self._present(f"{part} .section-body") and settled(), part)

    def settled(self, part: str) -> WebElement:
        """The body of the page's `part` once it shows something: a table, a sentence
        saying there is nothing, or why it could not load."""
        return self.wait(
            lambda: self.driver.find_elements(
                By.CSS_SELECTOR, f"{part} .section-body :is(table, .empty, .error)"
            ),
            f"{part} shows nothing",
        )

    def page_text(self) -> str:
        return self.driver.find_element(By.TAG_NAME, "body").text

    def screenshot(self, path: Path, viewport: dict[str, int]) -> None:
        """The page at `viewport`'s width, as tall as it is (at least the viewport)."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        full = {**viewport, "height": max(viewport["height"], height)}
        self.driver.execute_cdp_cmd(
            "Emulation.setDeviceMetricsOverride", {**full, "deviceScaleFactor": 1, "mobile": False}
        )
        try:
            assert self.driver.save_screenshot(str(path)), path
        finally:
            self.driver.execute_cdp_cmd(
                "Emulation.setDeviceMetricsOverride",
                {**viewport, "deviceScaleFactor": 1, "mobile": False},
            )

    def _present(self, css: str) -> bool:
        return bool(self.driver.find_elements(By.CSS_SELECTOR, css))

    def is_hidden(self, css: str) -> bool:
        return all(not element.is_displayed() for element in self.find_all(css))

    def table(self, css: str, row_attribute: str) -> dict[str, dict[str, str]]:
        """The rows of the table `css`, by their `row_attribute`, each {data-column: text}."""
        rows = {}
        for row in self.find_all(f"{css} tbody tr"):
            cells = row.find_elements(By.CSS_SELECTOR, "td")
            rows[row.get_attribute(row_attribute)] = {
                cell.get_attribute("data-column"): cell.text for cell in cells
            }
        return rows

    # -- acting -----------------------------------------------------------------------------

    def click(self, css: str) -> None:
        self.find(css).click()

    def type_into(self, css: str, text: str) -> WebElement:
        element = self.find(css)
        element.clear()
        element.send_keys(text)
        return element

    def answer_dialog(self, confirm: bool) -> str:
        """Answer the open confirmation; gives back what it asked."""
        dialog = self.find("dialog#confirm[open]")
        question = dialog.text
        self.click("#confirm-ok" if confirm else "#confirm-cancel")
        self.wait(lambda: not self.find_all("dialog#confirm[open]"), "the dialog stays open")
        return question

    def inject_inline_script(self) -> dict[str, Any]:
        """Put inline script into the page as injected markup would bring it, a `<script>`
        element and an `onerror` handler; once both have run or been refused, what ran
        (`ran`: the names of those that did) and what the page's policy refused
        (`refused`: the directives it named)."""
        self.refusals_expected = True
        self.driver.execute_script(_INJECT)
        return self.wait(
            lambda: self.driver.execute_script(
                "const seen = window.__injection;"
                "return seen.ran.length + seen.refused.length >= 2 ? seen : null"
            ),
            "the injected script neither ran nor was refused",
        )

    # -- what the page did ------------------------------------------------------------------

    def alert_shown(self) -> bool:
        try:
            self.driver.switch_to.alert  # noqa: B018 - the lookup is the check
        except NoAlertPresentException:
            return False
        return True

    def problems(self) -> list[str]:
        """What the browser logged as SEVERE that is the console's fault: its scripts'
        errors, CSP refusals (bar those of script the test injected), files that failed to
        load, and /v1 answers no test asked for."""
        problems = []
        for entry in self.driver.get_log("browser"):
            if entry["level"] != "SEVERE":
                continue
            if self.refusals_expected and _INLINE_REFUSED.search(entry["message"]):
                continue
            failed = _FAILED_LOAD.match(entry["message"]) if entry["source"] == "network" else None
            ours = failed and failed["url"].startswith(f"{self.service.url}/v1/")
            if ours and int(failed["status"]) in self.expected_statuses:
                continue
            problems.append(f"{entry['source']}: {entry['message']}")
        return problems


def message_path(queue: str, key: str) -> str:
    """A deep link to a message, its key encoded as the console encodes it."""
    return f"/console/queues/{queue}/messages/{quote(key, safe='')}"
