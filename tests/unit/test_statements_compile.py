"""Every statement of every room compiles for every dialect that runs it, without a database.

The statements are found, not listed: each room module's `__all__` (app/storage/statements/),
resolved per dialect (`dialect.statements.<room>`, a dialect's variant in place of the
shared one), every Core statement in it (a `Removal`'s, a group's such as `KeyedLocks`,
a mapping's such as PostgreSQL's `claims`); every page a list can ask for (each
ListState, by key or by due time, after a cursor or not, since a walk's start or not,
bounded or not; each history filter); a dialect's own statements (PostgreSQL's batch
arrays, staging table, removal cursor, in its package's modules) and what its removal
builders make of every removal. PostgreSQL's compile is its direct path's own (`DirectStatements`), which refuses
an expanding IN and positional parameters: a statement PostgreSQL would run but could not
fails here, at once.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.dialects.mysql.mariadb import loader as mariadb_dialect
from sqlalchemy.sql import Executable

from app.domain.pages import ListState
from app.storage.dialects import sqlite
from app.storage.dialects.base import Dialect
from app.storage.dialects.mariadb import MariaDBDialect
from app.storage.dialects.mariadb import removals as mariadb_removals
from app.storage.dialects.mariadb import statements as mariadb_statements
from app.storage.dialects.postgresql import (
    PostgreSQLDialect,
    common,
    cron,
    groups,
    leases,
    lists,
    messages,
    removals,
    table_health,
)
from app.storage.dialects.postgresql.direct import DirectStatements
from app.storage.statements import ROOMS, resolved
from app.storage.statements import common as shared
from app.storage.statements.common import Removal

# Each dialect, with the modules that hold its statements.
DIALECTS: dict[str, tuple[type[Dialect], tuple[ModuleType, ...]]] = {
    "sqlite": (sqlite.SQLiteDialect, (sqlite,)),
    "mariadb": (MariaDBDialect, (mariadb_statements, mariadb_removals)),
    "postgresql": (
        PostgreSQLDialect,
        (common, messages, leases, groups, cron, lists, table_health, removals),
    ),
}
# The SQLAlchemy dialects the engines use (app/storage/engine.py), none connected; the
# MariaDB one made from its class, so that no driver need be installed (an engine's URL
# would import it).
_COMPILERS = {
    "sqlite": create_engine("sqlite://").dialect,
    "mariadb": mariadb_dialect("mysqldb")(),
}


def compile_for(name: str, statement: Any) -> str:
    """`statement`'s text as the dialect `name` runs it (PostgreSQL: its direct path)."""
    if name == "postgresql":
        return DirectStatements(answer_deadline=1.0).compiled(statement, {}).sql
    return str(statement.compile(dialect=_COMPILERS[name]))


def statements_in(value: Any) -> Iterator[Any]:
    """The Core statements in `value`: itself, a Removal's three, a group's (a dataclass
    of statements) or a mapping's, each found the same way."""
    if isinstance(value, Executable):
        yield value
    elif isinstance(value, Removal):
        yield from (value.delete, value.record, value.keys)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for field in dataclasses.fields(value):
            yield from statements_in(getattr(value, field.name))
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from statements_in(item)


def _room_statements() -> Iterator[tuple[str, str, str, Any]]:
    """(dialect, room, name, statement) of every statement each dialect resolves."""
    for dialect, (cls, _modules) in DIALECTS.items():
        for room in ROOMS:
            namespace: SimpleNamespace = getattr(cls.statements, room)
            for name, value in vars(namespace).items():
                for index, statement in enumerate(statements_in(value)):
                    yield dialect, room, f"{name}[{index}]", statement


def _list_pages() -> Iterator[tuple[str, str, Any]]:
    """(dialect, combination, statement) of every page each dialect's lists build."""
    for dialect, (cls, _modules) in DIALECTS.items():
        lists = cls.statements.lists
        for state, by_key, after, since, bounded in itertools.product(
            ListState, (False, True), (False, True), (False, True), (False, True)
        ):
            statement = lists.messages_page(
                lists.keys_by_bytes,
                lists.list_reads,
                by_key=by_key,
                state=state,
                after=after,
                since=since,
                bounded=bounded,
            )
            combination = (
                f"messages-{state.value}-by_key={by_key}-after={after}-since={since}"
                f"-bounded={bounded}"
            )
            yield dialect, combination, statement
        for key, outcome, before in itertools.product((False, True), repeat=3):
            statement = lists.history_page(
                lists.list_reads, key=key, outcome=outcome, before=before
            )
            yield dialect, f"history-key={key}-outcome={outcome}-before={before}", statement


def _removals(cls: type[Dialect]) -> list[Removal]:
    """Every Removal a dialect's rooms run."""
    found: list[Removal] = []

    def walk(value: Any) -> None:
        if isinstance(value, Removal):
            found.append(value)
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            for field in dataclasses.fields(value):
                walk(getattr(value, field.name))

    for room in ROOMS:
        for value in vars(getattr(cls.statements, room)).values():
            walk(value)
    return found


def _dialect_own() -> Iterator[tuple[str, str, Any]]:
    """(dialect, name, statement) of a dialect's own statements: those at the top level
    of its modules (its variants aside: the rooms' tests compile those), and what its
    removal builders make of each removal its rooms run."""
    for dialect, (_cls, modules) in DIALECTS.items():
        for module in modules:
            place = module.__name__.rpartition(".")[2]
            for name, value in sorted(vars(module).items()):
                if name in ("STATEMENTS", "VARIANTS") or isinstance(value, ModuleType):
                    continue
                for index, statement in enumerate(statements_in(value)):
                    yield dialect, f"{place}.{name}[{index}]", statement
    for index, removal in enumerate(_removals(PostgreSQLDialect)):
        yield "postgresql", f"recorded_delete[{index}]", removals.recorded_delete(removal)
        yield "postgresql", f"removal_cursor[{index}]", removals.removal_cursor(removal)
        for record in (False, True):
            yield (
                "postgresql",
                f"removed_keys[{index},{record}]",
                removals.removed_keys(removal, record),
            )
            yield (
                "postgresql",
                f"removal_page[{index},{record}]",
                removals.removal_page(removal, record),
            )
    builders = (
        mariadb_removals.deleting,
        mariadb_removals.id_page,
        mariadb_removals.key_page,
        mariadb_removals.deleting_ids,
    )
    for index, removal in enumerate(_removals(MariaDBDialect)):
        for builder in builders:
            yield "mariadb", f"{builder.__name__}[{index}]", builder(removal)


@pytest.mark.parametrize(
    ("dialect", "statement"),
    [
        pytest.param(dialect, statement, id=f"{dialect}-{room}.{name}")
        for dialect, room, name, statement in _room_statements()
    ],
)
def test_every_room_statement_compiles_as_its_dialect_runs_it(dialect, statement):
    assert compile_for(dialect, statement)


@pytest.mark.parametrize(
    ("dialect", "statement"),
    [
        pytest.param(dialect, statement, id=f"{dialect}-{combination}")
        for dialect, combination, statement in _list_pages()
    ],
)
def test_every_list_page_compiles_as_its_dialect_runs_it(dialect, statement):
    assert compile_for(dialect, statement)


@pytest.mark.parametrize(
    ("dialect", "statement"),
    [
        pytest.param(dialect, statement, id=f"{dialect}-{name}")
        for dialect, name, statement in _dialect_own()
    ],
)
def test_every_statement_of_a_dialect_module_compiles_for_it(dialect, statement):
    assert compile_for(dialect, statement)


def test_what_no_room_shares_every_dialect_gives():
    # A shared None (messages' offer_insert: each database says "unless the key is
    # taken" its own way) is a statement every dialect must give; a dialect's None is
    # one it never runs (PostgreSQL's select-then-update claim, done by its `claims`),
    # and a room's OPTIONAL ones are readings a database may not have (the tables'
    # health: SQLite tells nothing of it).
    for room, module in ROOMS.items():
        optional = getattr(module, "OPTIONAL", frozenset())
        for name in module.__all__:
            if getattr(module, name) is None and name not in optional:
                for dialect, (cls, _modules) in DIALECTS.items():
                    given = getattr(getattr(cls.statements, room), name)
                    assert given is not None, f"{dialect} gives no {room}.{name}"


def test_postgresql_runs_no_shared_statement_its_direct_path_cannot():
    # Each statement PostgreSQL resolves, shared or its own, compiles on its direct
    # path (the parametrised tests above); what it does not run is None, and only the
    # select-then-update claim is, and InnoDB's undo history, which PostgreSQL has not.
    resolved_leases = PostgreSQLDialect.statements.leases
    assert resolved_leases.claims and set(resolved_leases.claims) == set(
        itertools.product((False, True), repeat=2)
    )
    never_run = {
        f"{room}.{name}"
        for room in ROOMS
        for name, value in vars(getattr(PostgreSQLDialect.statements, room)).items()
        if value is None
    }
    assert never_run == {
        "leases.claim_candidates",
        "leases.claim_update",
        "leases.claim_update_limited",
        "table_health.undo_history",
    }


def test_each_database_reads_the_tables_health_it_has():
    # PostgreSQL: its statistics and every holder of vacuum; MariaDB: InnoDB's purge;
    # SQLite: nothing (docs/decisions/0024-table-health.md).
    given = {
        dialect: {
            name for name, value in vars(cls.statements.table_health).items() if value is not None
        }
        for dialect, (cls, _modules) in DIALECTS.items()
    }
    assert given == {
        "postgresql": {"table_vacuums", "vacuum_holders"},
        "mariadb": {"vacuum_holders", "undo_history"},
        "sqlite": set(),
    }


def test_a_variant_replaces_a_statement_of_its_room_by_name():
    with pytest.raises(ValueError, match="no statement of leases"):
        resolved({"leases": {"claim_candidate": None}})
    with pytest.raises(ValueError, match="no such rooms"):
        resolved({"lease": {}})


def test_every_statement_of_a_room_module_is_in_its_index():
    # A room module's statements are its __all__ (what a dialect may replace, and what
    # the tests above compile): one built there but left out would be neither.
    for room, module in ROOMS.items():
        built = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and any(True for _ in statements_in(value))
        }
        imported = {
            name
            for name, value in vars(module).items()
            for other in (shared, *ROOMS.values())
            if other is not module and getattr(other, name, None) is value
        }
        missing = built - imported - set(module.__all__)
        assert not missing, f"{room}: {sorted(missing)} not in __all__"
