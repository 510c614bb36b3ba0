"""PostgreSQL's statements of the lists room: payloads by an array of ids, and keys in
byte order whatever the database's collation (its variants in VARIANTS)."""

from __future__ import annotations

from sqlalchemy import literal_column, select

from app.storage.dialects.postgresql.common import ids
from app.storage.statements.common import columns, in_queue
from app.storage.statements.lists import KeyOrder

VARIANTS = {
    "payloads_by_id": select(columns.id, columns.payload).where(ids, in_queue),
    # Byte order whatever the database's collation: the operators of
    # varchar_pattern_ops, the operator class of the index that leads to it
    # (revision 0006).
    "keys_by_bytes": KeyOrder(
        after=columns.pKey.op("~>~", is_comparison=True),
        at_or_after=columns.pKey.op("~>=~", is_comparison=True),
        before=columns.pKey.op("~<~", is_comparison=True),
        ascending=literal_column('"pKey" USING ~<~'),
    ),
}
