"""The wheel carries every package of `app` (pyproject.toml lists them by hand), and the
console's files (its pages and the docs', scripts, styles, and the docs' vendored assets
with their licences), which the service serves from the installed package."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONSOLE = ROOT / "app" / "console"


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _console_files() -> set[str]:
    """Every file under app/console/pages and app/console/static, relative to app/console."""
    return {
        path.relative_to(CONSOLE).as_posix()
        for folder in ("pages", "static")
        for path in (CONSOLE / folder).rglob("*")
        if path.is_file()
    }


def test_every_package_of_app_is_in_the_wheel():
    listed = set(_setuptools()["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "app").rglob("__init__.py")
        if "migrations" not in init.parent.relative_to(ROOT).parts  # mapped from migrations/
    }
    assert found <= listed, f"missing from [tool.setuptools] packages: {sorted(found - listed)}"


def test_the_package_data_lists_every_console_file():
    patterns = _setuptools()["package-data"]["app.console"]
    listed = {
        path.relative_to(CONSOLE).as_posix()
        for pattern in patterns
        for path in CONSOLE.glob(pattern)
        if path.is_file()
    }
    assert {"pages/console.html", "static/js/main.js", "static/console.css"} <= _console_files()
    assert _console_files() <= listed, (
        f"missing from [tool.setuptools.package-data] app.console: {_console_files() - listed}"
    )


def test_the_wheel_carries_the_console(tmp_path):
    # Built as `pip install .` builds it (with its build requirements, ~10 s), from a copy
    # of what the wheel is made of, so the checkout gets no build/ of its own.
    source = tmp_path / "source"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("app", "migrations"):
        shutil.copytree(ROOT / folder, source / folder, symlinks=True, ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet"),
            *("--wheel-dir", str(tmp_path / "wheel"), str(source)),
        ],
        capture_output=True,
        text=True,
        check=False,  # its output is the assertion's message
    )
    assert built.returncode == 0, built.stdout + built.stderr
    (wheel,) = (tmp_path / "wheel").glob("hourglass-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        carried = {name for name in archive.namelist() if name.startswith("app/console/")}
    expected = {f"app/console/{name}" for name in _console_files()}
    assert expected <= carried, f"not in the wheel: {sorted(expected - carried)}"
    assert {"app/console/__init__.py", "app/console/routes.py"} <= carried
