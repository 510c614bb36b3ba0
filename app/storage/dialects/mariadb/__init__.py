"""MariaDB: the dialect (dialect.py)."""

from app.storage.dialects.mariadb.dialect import MariaDBDialect

__all__ = ["MariaDBDialect"]
