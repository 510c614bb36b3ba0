"""Every statement storage runs, one module per room, and how a dialect's variants take
their place.

Each room's module (`messages`, `leases`, `cron`, `settings`, `groups`, `history`, `lists`,
`table_health`) holds its statements as Core objects built once, each with why, and lists
them in `__all__`; `common` holds what the rooms share (the columns and conditions, a
removal, the history row). A dialect whose database needs a statement written otherwise
declares its variant under the same name in its own modules (app/storage/dialects/<db>: a
module, or a package of them), room by room:

    STATEMENTS = {"leases": {"claimed_payloads": …}, "messages": {"offer_insert": …}}

and its `Dialect` resolves them once (`resolved(STATEMENTS)`): a room then reads
`dialect.statements.leases.claimed_payloads`, the dialect's variant where there is one,
the room module's otherwise. A statement a room module leaves None is one every dialect
must give, unless the module lists it in its `OPTIONAL` (a reading some databases do not
have, as the tables' health). tests/unit/test_statements_compile.py compiles every one,
for every dialect, without a database.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType, SimpleNamespace
from typing import Any

from app.storage.statements import (
    cron,
    groups,
    history,
    leases,
    lists,
    messages,
    settings,
    table_health,
)

# The room modules, by the name a dialect's STATEMENTS gives them.
ROOMS: dict[str, ModuleType] = {
    "messages": messages,
    "leases": leases,
    "cron": cron,
    "settings": settings,
    "groups": groups,
    "history": history,
    "lists": lists,
    "table_health": table_health,
}

# A dialect's variants: room → statement name (one of the room module's) → its variant.
Variants = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Statements:
    """The statements of each room as one dialect runs them."""

    messages: SimpleNamespace
    leases: SimpleNamespace
    cron: SimpleNamespace
    settings: SimpleNamespace
    groups: SimpleNamespace
    history: SimpleNamespace
    lists: SimpleNamespace
    table_health: SimpleNamespace


def resolved(variants: Variants) -> Statements:
    """Each room module's statements (its `__all__`), with `variants` in their place.

    A variant must replace a statement of its room, by that statement's name: a name the
    room does not have is a mistake (a typo, a statement renamed), refused here."""
    unknown_rooms = set(variants) - set(ROOMS)
    if unknown_rooms:
        raise ValueError(f"no such rooms of statements: {sorted(unknown_rooms)}")
    rooms: dict[str, SimpleNamespace] = {}
    for name, module in ROOMS.items():
        own = dict(variants.get(name, {}))
        unknown = set(own) - set(module.__all__)
        if unknown:
            raise ValueError(f"variants of no statement of {name}: {sorted(unknown)}")
        shared = {statement: getattr(module, statement) for statement in module.__all__}
        rooms[name] = SimpleNamespace(**(shared | own))
    return Statements(**rooms)
