"""PostgreSQL's removals of messages: each in one statement with the history rows it
records (a DELETE … RETURNING in a CTE), and a purge read through a cursor and removed
page by page, within the statement bound."""

from __future__ import annotations

from functools import cache
from typing import Any

from sqlalchemy import delete, func, select, text
from sqlalchemy import insert as insert_into
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql import ClauseElement, Executable, Select
from sqlalchemy.sql.dml import Insert, ReturningDelete

from app.storage.dialects.postgresql.common import ids
from app.storage.statements.common import (
    HISTORY_COLUMNS,
    HISTORY_SOURCE,
    Removal,
    columns,
    history_values,
)
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import delivery_history


def recorded_delete(removal: Removal) -> Insert:
    """Record `removal`'s rows in the history and delete them in one statement, so nothing
    can change the rows between recording and deleting:
    WITH gone AS (DELETE … RETURNING …) INSERT INTO delivery_history SELECT … FROM gone."""
    gone = (
        delete(queue_table)
        .where(removal.where)
        .returning(*(columns[name] for name in HISTORY_SOURCE))
        .cte("gone")
    )
    return (
        insert_into(delivery_history)
        .from_select(HISTORY_COLUMNS, select(*history_values(gone.c)))
        # SQLAlchemy keeps an INSERT's row count only when asked to.
        .execution_options(preserve_rowcount=True)
    )


@cache
def removed_keys(removal: Removal, record: bool) -> Select | ReturningDelete:
    """Delete what `removal` matches, recording it in the history when `record`, in one
    statement that returns the keys deleted: nothing can change the rows between."""
    if not record:
        return removal.delete.returning(columns.pKey)
    gone = (
        delete(queue_table)
        .where(removal.where)
        .returning(*(columns[name] for name in HISTORY_SOURCE))
        .cte("gone")
    )
    recorded = insert_into(delivery_history).from_select(
        HISTORY_COLUMNS, select(*history_values(gone.c))
    )
    return select(gone.c.pKey).add_cte(recorded.cte("recorded"))


# Rows per statement of a removal in pages (a purge): a page takes ~70 ms on this
# project's test machine, far within any statement bound, where one DELETE of a
# 1,000,000-row queue with its history rows takes ~6 s.
_PAGE_ROWS = 10_000
_REMOVAL_CURSOR = "removal_ids"


class _DeclareCursor(Executable, ClauseElement):
    """`DECLARE name NO SCROLL CURSOR FOR <select>`: a query read a page at a time, each
    FETCH its own statement."""

    inherit_cache = True

    def __init__(self, name: str, query: Select) -> None:
        self.name = name
        self.query = query


@compiles(_DeclareCursor)
def _compile_declare_cursor(element: _DeclareCursor, compiler: Any, **options: Any) -> str:
    query = compiler.process(element.query, **options)
    return f"DECLARE {element.name} NO SCROLL CURSOR FOR {query}"


fetch_page = text(f"FETCH {_PAGE_ROWS} FROM {_REMOVAL_CURSOR}")
close_cursor = text(f"CLOSE {_REMOVAL_CURSOR}")


@cache
def removal_cursor(removal: Removal) -> _DeclareCursor:
    """The ids `removal` matches as its transaction begins to remove them, read on through
    a cursor, never again from the start: whatever the plan, and fresh statistics or not,
    no page sorts or scans again what the pages before it read."""
    return _DeclareCursor(_REMOVAL_CURSOR, select(columns.id).where(removal.where))


@cache
def removal_page(removal: Removal, record: bool) -> Select:
    """Delete the rows of one page of ids (an array, "ids") that `removal` still matches,
    recording them in the history when `record`, in one statement; how many."""
    gone = (
        delete(queue_table)
        .where(ids)
        .where(removal.where)
        .returning(*(columns[name] for name in HISTORY_SOURCE))
        .cte("gone")
    )
    statement = select(func.count()).select_from(gone)
    if record:
        recorded = insert_into(delivery_history).from_select(
            HISTORY_COLUMNS, select(*history_values(gone.c))
        )
        statement = statement.add_cte(recorded.cte("recorded"))
    return statement
