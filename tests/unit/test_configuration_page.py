"""docs/operations/configuration.md lists every setting app/config.py reads, with its
default, and no setting that does not exist."""

from __future__ import annotations

import re
from pathlib import Path

from app.config import Settings

PAGE = Path(__file__).resolve().parents[2] / "docs" / "operations" / "configuration.md"
# A table row naming a setting: | `HOURGLASS_NAME` | default | …
_ROW = re.compile(r"^\| `(HOURGLASS_[A-Z_]+)` \| ([^|]+) \|", re.MULTILINE)


def _shown(default: object) -> str:
    """A default as the page writes it."""
    if default == "":
        return "(none)"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, float):
        return f"`{default:g}`"
    return f"`{default}`"


def test_every_setting_is_on_the_page_with_its_default():
    rows = {name: default.strip() for name, default in _ROW.findall(PAGE.read_text())}
    expected = {
        f"HOURGLASS_{name.upper()}": _shown(field.default)
        for name, field in Settings.model_fields.items()
    }
    assert rows == expected
