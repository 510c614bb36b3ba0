"""What differs between databases, one small module each; `for_engine_url` picks one."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from app.storage.dialects.base import Bounds, Dialect


def for_engine_url(url: str, bounds: Bounds | None = None) -> Dialect:
    """The dialect for a SQLAlchemy URL (`postgresql+psycopg://…`, `sqlite:///…`), waiting
    on the database within `bounds` (by default, the settings' defaults)."""
    backend = make_url(url).get_backend_name()
    if backend == "postgresql":
        from app.storage.dialects.postgresql import PostgreSQLDialect

        return PostgreSQLDialect(bounds)
    if backend in ("mariadb", "mysql"):  # mysql://… is MariaDB's too
        from app.storage.dialects.mariadb import MariaDBDialect

        return MariaDBDialect(bounds)
    if backend == "sqlite":
        from app.storage.dialects.sqlite import SQLiteDialect

        return SQLiteDialect(bounds)
    raise ValueError(
        f"unsupported database {backend!r}: use PostgreSQL (postgresql://…), MariaDB "
        "(mariadb://…) or SQLite (sqlite:///…)"
    )


__all__ = ["Bounds", "Dialect", "for_engine_url"]
