"""The schema Alembic builds is the one the code describes, on every database."""

from __future__ import annotations

from alembic import command
from sqlalchemy import create_engine, inspect

from app.storage.schema import alembic_config


def test_alembic_check_finds_no_drift(database):
    command.check(alembic_config(database.url))  # raises on any difference


def test_the_message_table_has_the_seed_columns_and_indexes(database):
    engine = create_engine(database.url)
    try:
        inspector = inspect(engine)
        columns = {column["name"] for column in inspector.get_columns("delayed_queue")}
        indexes = {
            (tuple(index["column_names"]), bool(index["unique"]))
            for index in inspector.get_indexes("delayed_queue")
        }
    finally:
        engine.dispose()
    assert columns == {
        "id", "pKey", "pKind", "payload", "scheduledAt", "scheduledAtInitially", "createdAt", "lockUuid",
    }
    assert indexes >= {
        (("pKey", "pKind"), True),
        (("pKind", "scheduledAt"), False),
        (("lockUuid", "id"), False),
    }
