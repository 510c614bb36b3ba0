"""PostgreSQL: the dialect (dialect.py), its own pool of psycopg connections awaited
directly (direct.py), its LISTEN/NOTIFY between processes (peers.py) and its reads of
the tables' health (table_health.py)."""

from app.storage.dialects.postgresql.dialect import PostgreSQLDialect

__all__ = ["PostgreSQLDialect"]
