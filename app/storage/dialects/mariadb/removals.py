"""MariaDB's removals of messages: DELETE … RETURNING, then the history rows of exactly what
it deleted, a purge in pages of ids (or of keys) locked in order, within the statement
bound."""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import Select, bindparam, delete, func, select
from sqlalchemy.dialects.mysql import insert
from sqlalchemy.sql.dml import ReturningDelete

from app.storage.connection import Connection
from app.storage.statements.common import HISTORY_COLUMNS, HISTORY_SOURCE, Removal, columns
from app.storage.tables import delayed_queue as queue_table
from app.storage.tables import delivery_history

# Rows per DELETE … RETURNING of a removal (a purge may remove millions).
_REMOVAL_BATCH = 1000
# The greatest id there is (a removal in pages goes no further).
_LAST_ID = select(func.max(columns.id))
# The history rows of what a removal deleted, from the rows it returned (executemany).
_RECORD = insert(delivery_history)


async def removed_keys(
    connection: Connection, removal: Removal, parameters: dict, *, record: bool
) -> list[str]:
    """Remove what `removal` matches (at most 1000 keys, one row each: one DELETE),
    recording it in the history when `record`; the keys removed.

    DELETE … RETURNING, then the history rows of exactly what it deleted (as in
    remove_paged): reading the keys first would not lock them at READ COMMITTED."""
    gone = (await connection.execute(deleting(removal), parameters)).all()
    if record:
        await _record(connection, gone, parameters)
    return [row.pKey for row in gone]


async def remove_paged(
    connection: Connection, removal: Removal, parameters: dict, *, record: bool
) -> int:
    """Remove every row `removal` matches, recording them in the history when `record`;
    how many.

    DELETE … RETURNING, then the history rows of exactly what it deleted: at READ
    COMMITTED an INSERT … SELECT first would read without locking, and a row leased
    again in between would be recorded but not deleted. An acknowledgement (at most a
    poll's 1000 messages) takes one DELETE. A larger removal (a purge) goes on in pages
    of ids, locked in id order, up to the greatest id there was when it began: memory
    stays bounded, and each page starts where the last one ended instead of stepping
    again over the rows this transaction deleted."""
    gone = (await connection.execute(deleting(removal), parameters)).all()
    if record:
        await _record(connection, gone, parameters)
    removed = len(gone)
    if removed < _REMOVAL_BATCH:
        return removed
    if removal.keys_after is not None:
        return removed + await _remove_in_key_pages(connection, removal, parameters)
    last = (await connection.execute(_LAST_ID, {})).scalar()
    after = 0
    while True:
        page = {**parameters, "after": after, "last": last}
        ids = (await connection.execute(id_page(removal), page)).scalars().all()
        if not ids:
            return removed
        gone = (await connection.execute(deleting_ids(removal), {**parameters, "ids": ids})).all()
        if record:
            await _record(connection, gone, parameters)
        removed += len(gone)
        after = ids[-1]


async def _remove_in_key_pages(connection: Connection, removal: Removal, parameters: dict) -> int:
    """The rest of a removal whose rows are one range of keys (a cron entry's runs), in
    pages of that range: paged by id, the optimizer at times read the whole table in
    id order for each page instead (4 s beside 1,000,000 messages, for no row)."""
    removed = 0
    parameters = dict(parameters)
    while True:
        page = (await connection.execute(key_page(removal), parameters)).all()
        if not page:
            return removed
        ids = [row.id for row in page]
        gone = (await connection.execute(deleting_ids(removal), {**parameters, "ids": ids})).all()
        await _record(connection, gone, parameters)
        removed += len(gone)
        if len(page) < _REMOVAL_BATCH:
            return removed
        parameters[removal.keys_after] = page[-1].pKey


async def _record(connection: Connection, gone: Sequence[Any], parameters: dict) -> None:
    if gone:
        finish = (parameters["outcome"], parameters["now"])
        await connection.execute(
            _RECORD,
            [dict(zip(HISTORY_COLUMNS, (*row, *finish), strict=True)) for row in gone],
        )


@cache
def deleting(removal: Removal) -> ReturningDelete[Any]:
    """Deleting the first rows `removal` matches, at most a page, returning what the
    history records of them."""
    return removal.delete.with_dialect_options(
        mysql_limit=_REMOVAL_BATCH, mariadb_limit=_REMOVAL_BATCH
    ).returning(*(columns[name] for name in HISTORY_SOURCE))


@cache
def id_page(removal: Removal) -> Select:
    """The next ids `removal` matches, in order, locked.

    Read along the primary key from where the last page ended, whatever the
    statistics say: the optimizer otherwise took the queue's own index at times
    and sorted what was left of the queue for every page (up to 0.9 s a page for
    300,000 rows, more with more), where the statement bound allows 10 s."""
    return (
        select(columns.id)
        .with_hint(queue_table, "FORCE INDEX (PRIMARY)")
        .where(
            removal.where,
            columns.id > bindparam("after"),
            columns.id <= bindparam("last"),
        )
        .order_by(columns.id)
        .limit(_REMOVAL_BATCH)
        .with_for_update()
    )


@cache
def key_page(removal: Removal) -> Select:
    """The next ids and keys `removal` matches, in key order, locked."""
    return (
        select(columns.id, columns.pKey)
        .where(removal.where)
        .order_by(columns.pKey)
        .limit(_REMOVAL_BATCH)
        .with_for_update()
    )


@cache
def deleting_ids(removal: Removal) -> ReturningDelete[Any]:
    """Deleting the rows of a page by id alone: the page's SELECT matched them and
    locks them until the transaction ends, so no other condition is needed, and
    one would let the optimizer read the queue by "pKind" (ref) instead of the ids
    by the primary key, at times (1-4 s a page of 1,000, past the statement bound)."""
    return (
        delete(queue_table)
        .where(columns.id.in_(bindparam("ids", expanding=True)))
        .returning(*(columns[name] for name in HISTORY_SOURCE))
    )
