"""docs/architecture.md maps every module to the tests that hold it: each module of `app/` and
of the Python client has its row in "Where each module is tested", every file a row names
exists, and no module of `app/` (the console's ES modules too) or `clients/python/` (its tests
included) passes 450 lines."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SECTION = "## Where each module is tested"
# Third-party code shipped as it came, and the Alembic revisions (app/migrations is a link
# to migrations/ at the top): neither is a module of ours to map.
SKIPPED = ("app/console/static/vendor/", "app/migrations/")
# A module longer than this mixes jobs: split it by what it owns.
MAX_LINES = 450

# A row of one of the section's tables: `| `module` | what it owns | tests |`.
_ROW = re.compile(r"^\|\s*`([^`]+\.py)`\s*\|[^|]*\|(.*)\|\s*$")
# A file named by its path from the repository's root (a bare `cli.py` in prose is no path).
_PATH = re.compile(r"`([\w.-]+/[\w./-]+\.py)`")


def _python_files(*folders: str) -> list[str]:
    """Every .py file under `folders`, relative to the repository, but the skipped ones."""
    found = set()
    for folder in folders:
        for path in (ROOT / folder).rglob("*.py"):
            name = path.relative_to(ROOT).as_posix()
            if not name.startswith(SKIPPED) and "__pycache__" not in path.parts:
                found.add(name)
    return sorted(found)


def _modules() -> list[str]:
    return _python_files("app", "clients/python/hourglass_client")


def _section() -> list[str]:
    """The lines of the map: from its heading to the next section's."""
    lines = ARCHITECTURE.read_text().splitlines()
    assert SECTION in lines, f"docs/architecture.md has no section {SECTION!r}"
    start = lines.index(SECTION) + 1
    end = next(
        (index for index in range(start, len(lines)) if lines[index].startswith("## ")),
        len(lines),
    )
    return lines[start:end]


def _rows() -> dict[str, list[str]]:
    """Each row's module, and the files its tests cell names."""
    rows: dict[str, list[str]] = {}
    for line in _section():
        if match := _ROW.match(line):
            module, tests = match.groups()
            assert module not in rows, f"{module} has two rows"
            rows[module] = _PATH.findall(tests)
    return rows


def test_every_module_has_its_row_and_every_row_a_module():
    rows = _rows()
    modules = _modules()
    missing = [module for module in modules if module not in rows]
    gone = [module for module in rows if module not in modules]
    assert not missing, f"modules without a row in {SECTION!r}: {missing}"
    assert not gone, f"rows of {SECTION!r} naming no module of the tree: {gone}"


def test_every_row_names_tests_and_every_file_named_exists():
    rows = _rows()
    untested = [module for module, tests in rows.items() if not tests]
    assert not untested, f"rows that name no test file: {untested}"
    named = {path for line in _section() for path in _PATH.findall(line)}
    absent = sorted(path for path in named if not (ROOT / path).is_file())
    assert not absent, f"files {SECTION!r} names that do not exist: {absent}"


def test_the_map_finds_rows_and_paths():
    # The checks above pass on an empty map too: make sure they read what is there.
    row = "| `app/x.py` | owns | `tests/unit/test_x.py`, `clients/python/tests/test_y.py` |"
    match = _ROW.match(row)
    assert match is not None and match.group(1) == "app/x.py"
    assert _PATH.findall(match.group(2)) == [
        "tests/unit/test_x.py",
        "clients/python/tests/test_y.py",
    ]
    assert _rows(), f"no row read from {SECTION!r}"


def _console_modules() -> list[str]:
    """The console's own ES modules (its vendored libraries are not ours to split)."""
    scripts = (ROOT / "app" / "console" / "static").rglob("*.js")
    return sorted(
        path.relative_to(ROOT).as_posix() for path in scripts if "vendor" not in path.parts
    )


def test_no_module_passes_the_line_limit():
    counts = {
        name: len((ROOT / name).read_text().splitlines())
        for name in _python_files("app", "clients/python") + _console_modules()
    }
    over = [f"{name} ({lines} lines)" for name, lines in counts.items() if lines > MAX_LINES]
    assert not over, f"over {MAX_LINES} lines, split by what each part owns: {', '.join(over)}"
