"""MariaDB: the dialect (dialect.py), its variants of the rooms' statements
(statements.py) and its removals in pages (removals.py)."""

from app.storage.dialects.mariadb.dialect import MariaDBDialect

__all__ = ["MariaDBDialect"]
