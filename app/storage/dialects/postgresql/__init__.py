"""PostgreSQL: the dialect (dialect.py), its variants of the rooms' statements, one module
per room (messages, leases, groups, cron, lists, table_health; common.py what they share)
and its removals (removals.py), its own pool of psycopg connections awaited directly
(direct.py), and its LISTEN/NOTIFY between processes (peers.py)."""

from app.storage.dialects.postgresql.dialect import PostgreSQLDialect

__all__ = ["PostgreSQLDialect"]
