"""The API page (docs/api/index.md) names every problem type the service answers with, so
a client's author finds each error they may meet in one table."""

from __future__ import annotations

import re

from app.api import errors
from tests.docs.examples import ROOT

API_PAGE = ROOT / "docs" / "api" / "index.md"


def _slugs_in_the_code() -> set[str]:
    slugs = {slug for _, slug in errors._DOMAIN_ERRORS.values()}
    for path in (ROOT / "app").rglob("*.py"):
        slugs |= set(re.findall(r'slug="([a-z-]+)"', path.read_text()))
    return slugs


def test_every_problem_type_is_on_the_api_page():
    table = API_PAGE.read_text().split("## Errors", 1)[1]
    listed = set(re.findall(r"`([a-z]+(?:-[a-z]+)+|[a-z]+)`", table))
    missing = _slugs_in_the_code() - listed
    assert not missing, f"problem types docs/api/index.md does not list: {sorted(missing)}"
