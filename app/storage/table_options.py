"""MariaDB's table options, one definition for app/storage/tables.py and every revision.

InnoDB, utf8mb4, and keys that compare exactly: case-sensitively, byte for byte,
and without PAD SPACE (with utf8mb4_bin, "key" and "key " would be one key).
Both prefixes: SQLAlchemy's mariadb dialect (mariadb://) reads only mariadb_*
options, its mysql dialect (mysql://) only mysql_*. A change here changes what
earlier revisions create: it needs a new revision that alters existing tables.
"""

from __future__ import annotations

from typing import Any

MARIADB_TABLE_OPTIONS: dict[str, Any] = {
    f"{prefix}_{name}": value
    for prefix in ("mysql", "mariadb")
    for name, value in (
        ("engine", "InnoDB"),
        ("charset", "utf8mb4"),
        ("collate", "utf8mb4_nopad_bin"),
    )
}
