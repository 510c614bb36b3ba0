"""What PostgreSQL's statements of every room share: lists bound as arrays, since its
direct path has no expanding IN (`unnested`, `any_of`, `ids`), and the rows of one queue
under a list of keys (`keys_in_queue`)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, String, bindparam, func, select, true
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.sql import Select

from app.storage.statements.common import columns


def unnested(name: str, *columns: tuple[str, str, Any], ordinality: str | None = None) -> Any:
    """Arrays bound one parameter each, unnested side by side as the rows of `name`: each
    column (its name, its parameter's, its element type) one array; with `ordinality`, a
    column of that name numbers the rows in order."""
    arrays = func.unnest(
        *(bindparam(parameter, type_=ARRAY(kind)) for _, parameter, kind in columns)
    )
    names = [column for column, _, _ in columns]
    if ordinality is None:
        return arrays.table_valued(*names).render_derived(name=name)
    return arrays.table_valued(*names, with_ordinality=ordinality).render_derived(name=name)


def any_of(column: Any, name: str) -> Any:
    """`column` is one of the array bound as `name`: one statement text whatever the
    length of the list (the direct path has no expanding IN)."""
    return column == func.any(bindparam(name, type_=ARRAY(column.type)))


# The ids as one array: the direct path has no expanding IN.
ids = columns.id == func.any(bindparam("ids", type_=ARRAY(BigInteger)))


def keys_in_queue(**selected: Any) -> Select:
    """common.keys_in_queue for PostgreSQL: "pKey" and the expressions `selected` (by
    label) of the rows of one queue under the keys bound as one array ("keys").

    One statement text whatever the number of keys, so neither SQLAlchemy nor
    psycopg re-renders 500 placeholders. Each key is looked up on its own in the
    unique index (a LATERAL subquery with LIMIT 1 cannot be flattened into a
    join): with `"pKey" = ANY(…)` and statistics taken while the queue was small,
    the planner read every row of the queue instead, 126 ms for 200 keys of a
    1,000,000-row queue against 0.8 ms.
    """
    keys = (
        func.unnest(bindparam("keys", type_=ARRAY(String)))
        .table_valued("key", name="keys")
        .render_derived()
    )
    stored = (
        select(columns.id, *(value.label(label) for label, value in selected.items()))
        .where(columns.pKey == keys.c.key, columns.pKind == bindparam("queue"))
        .limit(1)
        .lateral("stored")
    )
    return select(keys.c.key.label("pKey"), *(stored.c[label] for label in selected)).select_from(
        keys.join(stored, true())
    )
