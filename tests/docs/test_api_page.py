"""The API page (docs/api/index.md) names every problem type the service answers with, so
a client's author finds each error they may meet in one table."""

from __future__ import annotations

import re

from app.api import errors
from tests.support.examples import ROOT

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


WORKERS_PAGE = ROOT / "docs" / "guide" / "workers.md"
_SIGNATURE = re.compile(r"`(\w+)\(([^`]*)\)`")


def test_the_clients_methods_are_on_the_workers_page_as_they_are():
    """The client's table of methods (docs/guide/workers.md) names every method with the
    parameters it takes, so a reader never misses an option the client has."""
    import inspect

    from hourglass_client import Client

    section = WORKERS_PAGE.read_text().split("## The client", 1)[1].split("\n## ", 1)[0]
    table = "\n".join(line for line in section.splitlines() if line.startswith("| `"))
    documented = {name: args for name, args in _SIGNATURE.findall(table) if hasattr(Client, name)}
    public = {
        name
        for name, member in vars(Client).items()
        if callable(member) and not name.startswith("_")
    } - {"close", "send"}  # the `with` block's end, and the one request every method makes
    assert public <= set(documented), f"not on the page: {sorted(public - set(documented))}"
    for name, args in documented.items():
        written = [part.strip().split("=")[0] for part in re.split(r",|\\\|", args)]
        written = [word for word in written if word and word != "…"]
        signature = inspect.signature(getattr(Client, name)).parameters.values()
        positional = [p.name for p in signature if p.name != "self" and p.kind != p.KEYWORD_ONLY]
        keywords = {p.name for p in signature if p.kind == p.KEYWORD_ONLY}
        shown_positional = written[: written.index("*")] if "*" in written else written
        shown_keywords = set(written[len(shown_positional) + 1 :])
        assert (shown_positional, shown_keywords) == (positional, keywords), (
            f"{name}: the page shows {written}, the client takes {positional} and {keywords}"
        )
