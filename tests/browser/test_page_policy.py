"""Inline script injected into the console, /docs or /redoc does not run (their
Content-Security-Policy refuses it, app/console/policy.py), while the pages themselves,
which run only files of the package, still render."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tests.browser.conftest import VIEWPORT
from tests.browser.pages import Console

PAGE_ONLY = pytest.mark.parametrize("service", ["sqlite"], indirect=True)


def _console_rendered(console: Console) -> None:
    console.wait(
        lambda: console.text("#updated").startswith("Updated"), "the overview shows no queues"
    )


def _swagger_ui_rendered(console: Console) -> None:
    schema = console.service.api.get("/openapi.json").json()
    operations = sum(len(item) for item in schema["paths"].values())
    console.wait(
        lambda: len(console.find_all(".opblock")) == operations,
        f"/docs does not show the {operations} operations",
    )


def _redoc_rendered(console: Console) -> None:
    console.wait(
        lambda: "Offer a message: create it, or update or ignore it" in console.page_text(),
        "/redoc shows no operation",
    )


PAGES = {"/console/": _console_rendered, "/docs": _swagger_ui_rendered, "/redoc": _redoc_rendered}


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n", path
    return struct.unpack(">II", header[16:24])


@PAGE_ONLY
@pytest.mark.parametrize("path", PAGES)
def test_injected_inline_script_does_not_run_and_the_page_still_renders(console, path, tmp_path):
    console.open(path)
    PAGES[path](console)

    injection = console.inject_inline_script()
    assert injection["ran"] == [], injection
    assert sorted(injection["refused"]) == ["script-src-attr", "script-src-elem"], injection

    # Still the page it was, refusing only what was injected (the fixture fails the test
    # on any other refusal or error the browser logged).
    PAGES[path](console)
    screenshot = tmp_path / f"{path.strip('/')}.png"  # of what a person sees first
    assert console.driver.save_screenshot(str(screenshot)), screenshot
    assert _png_size(screenshot) == (VIEWPORT["width"], VIEWPORT["height"])
