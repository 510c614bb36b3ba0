"""PostgreSQL's reads of the tables' health (its variants of the table_health room's
statements, in VARIANTS): the statistics of the message and history tables, and the oldest
transaction, prepared transaction, replication slot or standby that holds back their
vacuum (docs/decisions/0024-table-health.md)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Float,
    Text,
    and_,
    cast,
    column,
    extract,
    func,
    literal,
    null,
    or_,
    select,
    table,
    true,
    union_all,
)
from sqlalchemy.sql import ColumnElement, FromClause, Select

from app.storage.tables import delayed_queue, delivery_history

_stats = table(
    "pg_stat_user_tables",
    column("relid"),
    column("relname"),
    column("n_live_tup"),
    column("n_dead_tup"),
    column("last_vacuum"),
    column("last_autovacuum"),
)
_classes = table("pg_class", column("oid"), column("reloptions"))
_options = func.pg_options_to_table(_classes.c.reloptions).table_valued(
    "option_name", "option_value"
)
_activity = table(
    "pg_stat_activity",
    column("pid"),
    column("datname"),
    column("backend_type"),
    column("backend_xid"),
    column("backend_xmin"),
    column("xact_start"),
)
_prepared = table(
    "pg_prepared_xacts", column("transaction"), column("prepared"), column("database")
)
_slots = table("pg_replication_slots", column("xmin"))


def _on(setting: str) -> ColumnElement[Any]:
    return cast(func.current_setting(setting), Boolean)


# Autovacuum vacuums a table only while the server runs it (`autovacuum`, and
# `track_counts`, whose counts tell it what to vacuum) and the table's own
# `autovacuum_enabled` storage parameter does not turn it off.
_table_allows_autovacuum = func.coalesce(
    select(cast(_options.c.option_value, Boolean))
    .where(_options.c.option_name == "autovacuum_enabled")
    .scalar_subquery(),
    true(),
)

# The two tables by the names the service's own statements resolve (its search_path):
# live and dead rows as the statistics count them, and the last vacuum's end, whichever
# ran it.
table_vacuums = (
    select(
        _stats.c.relname.label("table"),
        _stats.c.n_live_tup.label("live_rows"),
        _stats.c.n_dead_tup.label("dead_rows"),
        extract("epoch", func.greatest(_stats.c.last_vacuum, _stats.c.last_autovacuum)).label(
            "last_vacuum_at"
        ),
        and_(_on("autovacuum"), _on("track_counts"), _table_allows_autovacuum).label("autovacuum"),
    )
    .select_from(_stats.join(_classes, _classes.c.oid == _stats.c.relid))
    .where(
        _stats.c.relid.in_(
            [func.to_regclass(name) for name in (delayed_queue.name, delivery_history.name)]
        )
    )
    .order_by(_stats.c.relname)
)


def _oldest(
    kind: str,
    source: FromClause,
    transactions: ColumnElement[Any],
    *conditions: ColumnElement[Any],
    seconds: ColumnElement[Any] | None = None,
    horizon: ColumnElement[Any] | None = None,
) -> Select[Any]:
    """One row for `kind`: its oldest holder among `source`'s rows that meet `conditions`
    (the most `transactions` old), with 0 transactions and seconds when none holds. A kind
    without a start time has NULL seconds and its `horizon` (NULL when none holds)."""
    held = cast(transactions, BigInteger)
    oldest = (
        select(
            held.label("transactions"),
            (cast(null(), Float) if seconds is None else seconds).label("seconds"),
            cast(null() if horizon is None else cast(horizon, Text), BigInteger).label("horizon"),
        )
        .select_from(source)
        .where(held.is_not(None), *conditions)
        .order_by(held.desc())
        .limit(1)
        .subquery(f"oldest_{kind}")
    )
    return select(
        literal(kind).label("kind"),
        (
            cast(null(), Float)
            if seconds is None
            else cast(func.coalesce(func.max(oldest.c.seconds), 0), Float)
        ).label("seconds"),
        func.coalesce(func.max(oldest.c.transactions), 0).label("transactions"),
        func.max(oldest.c.horizon).label("horizon"),
    )


def _seconds_since(start: ColumnElement[Any]) -> ColumnElement[Any]:
    return extract("epoch", func.now() - start)


# A session's horizon is the older of its transaction id (it wrote something) and its
# snapshot (it read something); vacuum keeps every row deleted after it. Counted: the
# sessions of this database (a session of another holds back only its own), and those
# of none, the standbys' WAL senders (hot_standby_feedback reports the standby's oldest
# query there when it has no slot). Left out: this read's own session, and autovacuum
# workers (vacuum does not hold back vacuum). Without pg_read_all_stats (or pg_monitor),
# the sessions of other roles show no horizon, and go uncounted.
_session_horizon = func.greatest(
    func.age(_activity.c.backend_xid), func.age(_activity.c.backend_xmin)
)
_other_session = _activity.c.pid != func.pg_backend_pid()
_standby = _activity.c.backend_type == "walsender"

vacuum_holders = union_all(
    _oldest(
        "transaction",
        _activity,
        _session_horizon,
        _other_session,
        _activity.c.datname == func.current_database(),
        _activity.c.backend_type.is_distinct_from("autovacuum worker"),
        _activity.c.backend_type.is_distinct_from("walsender"),
        seconds=_seconds_since(_activity.c.xact_start),
    ),
    _oldest(
        "prepared_transaction",
        _prepared,
        func.age(_prepared.c.transaction),
        _prepared.c.database == func.current_database(),
        seconds=_seconds_since(_prepared.c.prepared),
    ),
    # A slot's xmin holds back every database's vacuum (a physical slot's standby with
    # hot_standby_feedback, or a logical slot as it starts). Its catalog_xmin holds back
    # only the system catalogs' vacuum, never these tables': not counted.
    _oldest("replication_slot", _slots, func.age(_slots.c.xmin), horizon=_slots.c.xmin),
    _oldest(
        "standby",
        _activity,
        func.age(_activity.c.backend_xmin),
        _standby,
        or_(_activity.c.datname == func.current_database(), _activity.c.datname.is_(None)),
        horizon=_activity.c.backend_xmin,
    ),
)

# PostgreSQL has no undo log: what vacuum has left is the tables' dead rows.
VARIANTS = {"table_vacuums": table_vacuums, "vacuum_holders": vacuum_holders}
