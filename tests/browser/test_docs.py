"""/docs and /redoc from the package's own files: they render with no host reachable but
the service (the browser here resolves no other name)."""

from __future__ import annotations

import pytest

PAGE_ONLY = pytest.mark.parametrize("service", ["sqlite"], indirect=True)


def _loaded_from(console) -> list[str]:
    return console.driver.execute_script(
        "return performance.getEntriesByType('resource').map((entry) => entry.name)"
    )


@PAGE_ONLY
def test_swagger_ui_shows_every_operation_from_the_package(console):
    schema = console.service.api.get("/openapi.json").json()
    operations = sum(len(item) for item in schema["paths"].values())

    console.open("/docs")
    console.wait(
        lambda: len(console.find_all(".opblock")) == operations,
        f"/docs does not show the {operations} operations",
    )
    assert "Offer a message" in console.page_text()
    loaded = _loaded_from(console)
    assert f"{console.service.url}/console/static/vendor/swagger-ui/swagger-ui-bundle.js" in loaded
    assert all(url.startswith(f"{console.service.url}/") for url in loaded), loaded


@PAGE_ONLY
def test_redoc_shows_the_api_from_the_package(console):
    console.open("/redoc")
    console.wait(
        lambda: "Offer a message: create it, or update or ignore it" in console.page_text(),
        "/redoc shows no operation",
    )
    loaded = _loaded_from(console)
    assert f"{console.service.url}/console/static/vendor/redoc/redoc.standalone.js" in loaded
    assert all(url.startswith(f"{console.service.url}/") for url in loaded), loaded
