"""The wheel carries every package of `app` (pyproject.toml lists them by hand)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_of_app_is_in_the_wheel():
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for init in (ROOT / "app").rglob("__init__.py")
        if "migrations" not in init.parent.relative_to(ROOT).parts  # mapped from migrations/
    }
    assert found <= listed, f"missing from [tool.setuptools] packages: {sorted(found - listed)}"
