"""Alembic environment: the database from the config or HOURGLASS_DATABASE_URL, one upgrader at a time."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context
from sqlalchemy import text

from app.config import Settings
from app.storage.engine import create_unpooled_engine
from app.storage.tables import metadata

# Any constants: replicas that start together take turns to migrate.
_MIGRATION_LOCK_ID = 0x486F7572  # "Hour", PostgreSQL's advisory lock
_MIGRATION_LOCK_NAME = "hourglass_migrations"  # MariaDB's GET_LOCK

config = context.config
if config.config_file_name is not None:
    fileConfig(config.config_file_name, disable_existing_loggers=False)


def _database_url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().database_url


def _include_object(item, _name, type_, reflected, _compare_to) -> bool:
    """Whether autogenerate compares `item`: not an index the code declares for another
    database only, or others only (`info["only_on"]`, a name or a tuple of them:
    app/storage/tables.py)."""
    only_on = item.info.get("only_on") if type_ == "index" and not reflected else None
    if only_on is None:
        return True
    dialect = context.get_context().dialect.name
    return dialect in only_on if isinstance(only_on, tuple) else only_on == dialect


def run_migrations_offline() -> None:
    context.configure(
        url=_database_url(),
        target_metadata=metadata,
        literal_binds=True,
        compare_type=True,
        include_object=_include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    # Bounded as the service's sessions are, but for a statement's time: a migration may
    # rebuild an index of a large table, and replicas wait on the lock below for each
    # other's. A transaction left idle is still ended (the statement bound + 2 s).
    engine = create_unpooled_engine(_database_url(), statements=False)
    with engine.connect() as connection:
        context.configure(
            connection=connection,
            target_metadata=metadata,
            compare_type=True,
            include_object=_include_object,
            render_as_batch=connection.dialect.name == "sqlite",
        )
        if connection.dialect.name in ("mysql", "mariadb"):
            # MariaDB commits each DDL statement by itself, so a transaction cannot
            # hold the turn: a named lock of this session does, until it is released.
            # Its name is server-wide: the database's name is part of it.
            taken = connection.execute(
                text(f"SELECT GET_LOCK(CONCAT('{_MIGRATION_LOCK_NAME}.', DATABASE()), 300)")
            ).scalar()
            if taken is None:
                raise RuntimeError("the database URL names no database to migrate")
            if taken != 1:
                raise RuntimeError(
                    "another process has been migrating this database for 300 s; not migrating"
                )
        try:
            with context.begin_transaction():
                if connection.dialect.name == "postgresql":
                    connection.execute(text(f"SELECT pg_advisory_xact_lock({_MIGRATION_LOCK_ID})"))
                context.run_migrations()
        finally:
            if connection.dialect.name in ("mysql", "mariadb"):
                connection.execute(
                    text(f"SELECT RELEASE_LOCK(CONCAT('{_MIGRATION_LOCK_NAME}.', DATABASE()))")
                )
    engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
