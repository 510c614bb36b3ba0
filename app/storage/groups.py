"""Message groups: the marks that say which groups' fronts may have to change, and the
keeper's pass that makes each group's front (the messages a poll may take) its leased
messages and the earliest due of the rest, `group_concurrency` in all
(docs/decisions/0027-message-groups.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from app.domain.messages import DEFAULT_GROUP_CONCURRENCY, Settled
from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.runner import Runner


class SqlGroups:
    """Groups' marks and fronts."""

    def __init__(self, runner: Runner, dialect: Dialect) -> None:
        self.runner = runner
        self.statements = dialect.statements.groups

    async def marked(self, limit: int) -> dict[str, list[str]]:
        """The groups of the oldest `limit` marks, by queue, each once."""
        rows = await self.runner.rows(self.statements.marked_groups, {"limit": limit})
        found: dict[str, dict[str, None]] = {}
        for row in rows:
            found.setdefault(row.queue, {})[row.messageGroup] = None
        return {queue: list(groups) for queue, groups in found.items()}

    async def settle(self, queue: str, groups: Sequence[str], now: int) -> Settled:
        """Pass over `groups` of `queue`, in one transaction, taking their marks: each front
        becomes its leased messages and the earliest due of the rest, the queue's
        group_concurrency in all (read here: a change marks every group in its own
        transaction). A group another keeper holds is waited for."""

        async def settle(connection: Connection) -> Settled:
            stored = await connection.execute(self.statements.group_concurrency, {"queue": queue})
            concurrency = stored.scalar() or DEFAULT_GROUP_CONCURRENCY
            done = Settled()
            for group in sorted(set(groups)):  # one order for every keeper
                done += await self._settle(connection, queue, group, concurrency, now)
            return done

        return await self.runner.transaction(settle)

    async def _settle(
        self, connection: Connection, queue: str, group: str, concurrency: int, now: int
    ) -> Settled:
        the_group = {"queue": queue, "group": group}
        await connection.execute(self.statements.group_enlist, the_group)
        if (await connection.execute(self.statements.group_hold, the_group)).first() is None:
            return Settled()  # dropped by the keeper that held it: it had no messages
        await connection.execute(self.statements.group_marks_take, the_group)
        front = (await connection.execute(self.statements.group_front, the_group)).all()
        waiting = sorted(
            (_place(row, now), row.id)
            for row in await connection.execute(
                self.statements.group_waiting, {**the_group, "limit": concurrency}
            )
        )[:concurrency]
        if not front and not waiting:
            await connection.execute(self.statements.group_drop, the_group)
            return Settled(groups=1)
        leased = sum(row.lockUuid is not None for row in front)
        free = [(_place(row, now), row.id) for row in front if row.lockUuid is None]
        wanted = sorted(free + waiting)[: max(0, concurrency - leased)]
        wanted_ids = {row_id for _, row_id in wanted}
        leaving = [row_id for _, row_id in free if row_id not in wanted_ids]
        entering = {row_id for _, row_id in waiting if row_id in wanted_ids}
        if not leaving and not entering:
            return Settled(groups=1)
        ours = set(
            (
                await connection.execute(
                    self.statements.group_rows_hold, {"ids": leaving + sorted(entering)}
                )
            ).scalars()
        )
        left = 0
        if leaving_ours := [row_id for row_id in leaving if row_id in ours]:
            left = (
                await connection.execute(self.statements.group_leave, {"ids": leaving_ours})
            ).rowcount
        # The room the front has now. One of its messages another transaction holds stays
        # (a poll is leasing it); a waiting one another transaction holds stops the rest:
        # those after it must not overtake it.
        room = concurrency - (len(front) - left)
        moving: list[int] = []
        finished = left == len(leaving)
        for _, row_id in wanted:
            if row_id not in entering:
                continue
            if row_id not in ours:
                finished = False
                break
            if room <= 0:
                break
            moving.append(row_id)
            room -= 1
        entered = 0
        if moving:
            entered = (
                await connection.execute(self.statements.group_enter, {"ids": moving})
            ).rowcount
        if not finished:  # a pass after this one tries again
            await connection.execute(self.statements.group_mark, the_group)
        return Settled(1, entered, left, 0 if finished else 1)


def _place(row: Any, now: int) -> int:
    """Where a message stands in its group: when it was asked to be due, once it is due
    (a message released to be due at once keeps its place), else when it will be (one
    released to a later time waits behind those due before it)."""
    return row.scheduledAtInitially if row.scheduledAt <= now else row.scheduledAt
