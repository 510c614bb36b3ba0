"""Message groups: marking a group for the keeper, and the keeper's pass that keeps each
group's front (the messages a poll may take) its next `group_concurrency` messages
(docs/decisions/0027-message-groups.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from app.storage.connection import Connection
from app.storage.dialects import Dialect
from app.storage.runner import Runner

# Groups the keeper passes over per transaction.
PASS_GROUPS = 100


@dataclass(frozen=True, slots=True)
class Settled:
    """What a pass did: groups passed over, messages brought into fronts and sent back out
    of them, and groups left marked (a message it needed was held by another transaction,
    which marks the group again when it is done)."""

    groups: int = 0
    entered: int = 0
    left: int = 0
    unfinished: int = 0


class SqlGroups:
    """Groups' rows and fronts."""

    def __init__(self, runner: Runner, dialect: Dialect) -> None:
        self.runner = runner
        self.statements = dialect.statements.groups

    async def mark(
        self, connection: Connection, queue: str, groups: Iterable[str], now: int
    ) -> None:
        """Mark `groups` of `queue` for the keeper, in the caller's transaction (the one that
        changed their messages), in a fixed order: two writers of the same groups take
        their rows in the same order."""
        for group in sorted(set(groups)):
            await connection.execute(
                self.statements.group_mark, {"queue": queue, "group": group, "now": now}
            )

    async def mark_queue(self, queue: str, now: int) -> None:
        """Mark every group of `queue` (its group_concurrency changed)."""
        await self.runner.single(self.statements.queue_groups_mark, {"queue": queue, "now": now})

    async def due(self, before: int, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` groups, as (queue, group), marked at or before `before`, oldest first."""
        rows = await self.runner.rows(
            self.statements.dirty_groups, {"before": before, "limit": limit}
        )
        return [(row.queue, row.messageGroup) for row in rows]

    async def starved(self, limit: int) -> list[tuple[str, str]]:
        """Up to `limit` groups not marked whose front has room while messages wait, or
        that hold no message."""
        rows = await self.runner.rows(self.statements.starved_groups, {"limit": limit})
        return [(row.queue, row.messageGroup) for row in rows]

    async def settle(
        self, queue: str, groups: Sequence[str], concurrency: int, now: int
    ) -> Settled:
        """Pass over `groups` of `queue` (whose group_concurrency is `concurrency`), in one
        transaction: each front becomes its leased messages and the earliest due of the
        rest, up to `concurrency` in all."""

        async def settle(connection: Connection) -> Settled:
            done = Settled()
            for group in sorted(set(groups)):
                one = await self._settle(connection, queue, group, concurrency)
                done = Settled(
                    done.groups + one.groups,
                    done.entered + one.entered,
                    done.left + one.left,
                    done.unfinished + one.unfinished,
                )
            return done

        return await self.runner.transaction(settle)

    async def _settle(
        self, connection: Connection, queue: str, group: str, concurrency: int
    ) -> Settled:
        the_group = {"queue": queue, "group": group}
        held = (await connection.execute(self.statements.group_hold, the_group)).first()
        if held is None:
            return Settled()  # another keeper has it, or it is gone
        front = (await connection.execute(self.statements.group_front, the_group)).all()
        waiting = sorted(
            (row.scheduledAt, row.id)
            for row in await connection.execute(
                self.statements.group_waiting, {**the_group, "limit": concurrency}
            )
        )[:concurrency]
        if not front and not waiting:
            await connection.execute(self.statements.group_drop, the_group)
            return Settled(groups=1)
        leased = [row for row in front if row.lockUuid is not None]
        free = [(row.scheduledAt, row.id) for row in front if row.lockUuid is None]
        wanted = sorted(free + waiting)[: max(0, concurrency - len(leased))]
        wanted_ids = {row_id for _, row_id in wanted}
        leaving = [row_id for _, row_id in free if row_id not in wanted_ids]
        entering = [row_id for _, row_id in waiting if row_id in wanted_ids]
        if not leaving and not entering:
            await connection.execute(self.statements.group_clean, the_group)
            return Settled(groups=1)
        ours = set(
            (
                await connection.execute(
                    self.statements.group_rows_hold, {"ids": leaving + entering}
                )
            ).scalars()
        )
        left = 0
        if leaving_ours := [row_id for row_id in leaving if row_id in ours]:
            gone = await connection.execute(self.statements.group_leave, {"ids": leaving_ours})
            left = gone.rowcount
        # Room: the front as it is now. A message of it another transaction holds stays
        # (a poll is leasing it), and a waiting message held by another transaction stops
        # the rest: the ones after it must not overtake it.
        room = concurrency - (len(front) - left)
        moving, finished = [], left == len(leaving)
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
            went = await connection.execute(self.statements.group_enter, {"ids": moving})
            entered = went.rowcount
        if finished:
            await connection.execute(self.statements.group_clean, the_group)
        return Settled(1, entered, left, 0 if finished else 1)
