"""Message groups: the marks that say which groups' fronts may have to change, and the
keeper's pass that makes each group's front (the messages a poll may take) its leased
messages and the earliest due of the rest, `group_concurrency` in all
(docs/decisions/0027-message-groups.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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
        # On its own, no transaction around it: every keeper asks this ten times a second,
        # and a read's transaction held between its statements would be a session in a
        # transaction that often, for nothing.

        async def read(connection: Connection) -> list[Any]:
            return (await connection.execute(self.statements.marked_groups, {"limit": limit})).all()

        rows = await self.runner.autocommit(read)
        found: dict[str, dict[str, None]] = {}
        for row in rows:
            found.setdefault(row.queue, {})[row.messageGroup] = None
        return {queue: list(groups) for queue, groups in found.items()}

    async def settle(self, queue: str, groups: Sequence[str], now: int) -> Settled:
        """Pass over `groups` of `queue`, in one transaction, taking their marks: each front
        becomes its leased messages and the earliest due of the rest, the queue's
        group_concurrency in all (read here: a change marks every group in its own
        transaction). Groups another keeper holds are waited for."""
        ordered = sorted(set(groups))  # one order for every keeper
        if not ordered:
            return Settled()

        async def settle(connection: Connection) -> Settled:
            return await self._settle(connection, queue, ordered, now)

        return await self.runner.transaction(settle)

    async def _settle(
        self, connection: Connection, queue: str, groups: list[str], now: int
    ) -> Settled:
        statements = self.statements
        of_groups = {"queue": queue, "groups": groups}
        held = list((await connection.execute(statements.groups_hold, of_groups)).scalars())
        if len(held) < len(groups):  # rows to make first (a group's first pass)
            missing = sorted(set(groups) - set(held))
            if statements.groups_enlist is not None:
                await connection.execute(statements.groups_enlist, {**of_groups, "groups": missing})
            else:
                for group in missing:
                    await connection.execute(
                        statements.group_enlist, {"queue": queue, "group": group}
                    )
            held = list((await connection.execute(statements.groups_hold, of_groups)).scalars())
        if not held:
            return Settled()
        groups = held
        of_groups = {"queue": queue, "groups": groups}
        await connection.execute(statements.groups_marks_take, of_groups)
        # Read after the marks are taken, as everything the pass reads: a change of the
        # concurrency marks every group of the queue in its own transaction.
        stored = await connection.execute(statements.group_concurrency, {"queue": queue})
        concurrency = stored.scalar() or DEFAULT_GROUP_CONCURRENCY
        fronts: dict[str, list[Any]] = {group: [] for group in groups}
        for row in await connection.execute(statements.groups_front, of_groups):
            fronts[row.messageGroup].append(row)
        waiting = await self._waiting(connection, queue, groups, concurrency)

        plans = {group: _plan(fronts[group], waiting[group], concurrency, now) for group in groups}
        empty = [group for group in groups if not fronts[group] and not waiting[group]]
        if empty:
            await connection.execute(statements.groups_drop, {"queue": queue, "groups": empty})
        if not any(plan.leaving or plan.entering for plan in plans.values()):
            return Settled(groups=len(groups))
        moves = _moves(queue, plans)
        if statements.group_enter_skipping is not None:
            return await self._move_skipping(connection, queue, plans, fronts, moves)
        ours = set((await connection.execute(statements.group_rows_hold, moves)).scalars())
        # What the pass holds qualifies still (group_rows_hold): those it moves by id.
        leaving = [row_id for plan in plans.values() for row_id in plan.leaving if row_id in ours]
        if leaving:
            await connection.execute(statements.group_leave, {"ids": leaving})
        entering: list[int] = []
        unfinished: list[str] = []
        for group, plan in plans.items():
            enter, finished = plan.entered(ours, len(fronts[group]))
            entering += enter
            if not finished:
                unfinished.append(group)
        if entering:
            await connection.execute(statements.group_enter, {"ids": entering})
        for group in unfinished:  # a later pass tries again
            await connection.execute(statements.group_mark, {"queue": queue, "group": group})
        return Settled(len(groups), len(entering), len(leaving), len(unfinished))

    async def _move_skipping(
        self,
        connection: Connection,
        queue: str,
        plans: dict[str, _Plan],
        fronts: dict[str, list[Any]],
        moves: dict[str, Any],
    ) -> Settled:
        """The moves of `plans` where one statement takes and moves the messages nobody else
        holds that still qualify: out of the fronts first, then in while there is room. A
        waiting message the pass could not take must not be overtaken: any of its group
        brought in after it goes back at once, and the group is marked for a later pass."""
        statements = self.statements
        left: set[int] = set()
        if moves["leaving"]:
            moved = await connection.execute(statements.group_leave_skipping, moves)
            left = set(moved.scalars())
        wanted: dict[str, list[int]] = {}
        for group, plan in plans.items():
            room = plan.concurrency - (
                len(fronts[group]) - sum(row in left for row in plan.leaving)
            )
            entering = set(plan.entering)
            wanted[group] = [row for row in plan.wanted if row in entering][: max(0, room)]
        entering_moves = _moves(queue, plans, only=wanted)
        entered: set[int] = set()
        if entering_moves["entering"]:
            moved = await connection.execute(statements.group_enter_skipping, entering_moves)
            entered = set(moved.scalars())
        back: list[int] = []
        unfinished: list[str] = []
        for group, plan in plans.items():
            skipped = False
            for row_id in wanted[group]:
                if row_id not in entered:
                    skipped = True
                elif skipped:
                    back.append(row_id)
            if skipped or any(row not in left for row in plan.leaving):
                unfinished.append(group)
        if back:
            await connection.execute(statements.group_leave, {"ids": back})
        for group in unfinished:  # a later pass tries again
            await connection.execute(statements.group_mark, {"queue": queue, "group": group})
        return Settled(len(plans), len(entered) - len(back), len(left), len(unfinished))

    async def _waiting(
        self, connection: Connection, queue: str, groups: list[str], concurrency: int
    ) -> dict[str, list[tuple[int, int, int]]]:
        """Each group's first `concurrency` waiting messages of each priority, as
        (scheduledAt, scheduledAtInitially, id)."""
        found: dict[str, list[tuple[int, int, int]]] = {group: [] for group in groups}
        parameters: dict[str, Any] = {"queue": queue, "limit": concurrency}
        if self.statements.groups_waiting is not None:
            rows = await connection.execute(
                self.statements.groups_waiting, {**parameters, "groups": groups}
            )
            for row in rows:
                found[row.messageGroup].append((row.scheduledAt, row.scheduledAtInitially, row.id))
            return found
        for group in groups:
            rows = await connection.execute(
                self.statements.group_waiting, {**parameters, "group": group}
            )
            found[group] = [(row.scheduledAt, row.scheduledAtInitially, row.id) for row in rows]
        return found


@dataclass(frozen=True, slots=True)
class _Plan:
    """What one group's front should become: the messages to send out of it (front
    messages nobody holds that are no longer among its earliest) and to bring into it,
    in the order they should come (`wanted`: the front's free places, filled)."""

    wanted: list[int]
    leaving: list[int]
    entering: list[int]
    concurrency: int

    def entered(self, ours: set[int], front_size: int) -> tuple[list[int], bool]:
        """The messages to bring in, given those the pass holds (`ours`), and whether the
        plan is done. A front message another transaction holds stays (a poll is leasing
        it); a waiting message another transaction holds stops the rest: those after it
        must not overtake it."""
        left = sum(row_id in ours for row_id in self.leaving)  # held: they qualify
        room = self.concurrency - (front_size - left)
        finished = left == len(self.leaving)
        entering = set(self.entering)
        moving: list[int] = []
        for row_id in self.wanted:
            if row_id not in entering:
                continue
            if row_id not in ours:
                return moving, False
            if room <= 0:
                break
            moving.append(row_id)
            room -= 1
        return moving, finished


def _moves(
    queue: str, plans: dict[str, _Plan], only: dict[str, list[int]] | None = None
) -> dict[str, Any]:
    """The parameters of a pass's holds and moves: the messages to send out of fronts and
    to bring in (`only` those, for each group, when given), each with the group it was
    planned in, as (id, group) pairs and, for arrays, as two lists."""
    leaving = [(row, group) for group, plan in plans.items() for row in plan.leaving]
    entering = [
        (row, group)
        for group, plan in plans.items()
        for row in (plan.entering if only is None else only[group])
    ]
    if only is not None:
        leaving = []
    return {
        "queue": queue,
        "ids": [row for row, _ in leaving + entering],
        "leaving": leaving,
        "entering": entering,
        "leaving_ids": [row for row, _ in leaving],
        "leaving_groups": [group for _, group in leaving],
        "entering_ids": [row for row, _ in entering],
        "entering_groups": [group for _, group in entering],
    }


def _plan(
    front: list[Any], waiting: list[tuple[int, int, int]], concurrency: int, now: int
) -> _Plan:
    """A group's front made its leased messages and the earliest due of the rest."""
    leased = sum(row.lockUuid is not None for row in front)
    free = [
        (_place(row.scheduledAt, row.scheduledAtInitially, now), row.id)
        for row in front
        if row.lockUuid is None
    ]
    candidates = sorted(
        (_place(scheduled_at, initially, now), row_id)
        for scheduled_at, initially, row_id in waiting
    )[:concurrency]
    wanted = [row_id for _, row_id in sorted(free + candidates)[: max(0, concurrency - leased)]]
    chosen = set(wanted)
    return _Plan(
        wanted=wanted,
        leaving=[row_id for _, row_id in free if row_id not in chosen],
        entering=[row_id for _, row_id in candidates if row_id in chosen],
        concurrency=concurrency,
    )


def _place(scheduled_at: int, initially: int, now: int) -> int:
    """Where a message stands in its group: when it was asked to be due, once it is due
    (a message released to be due at once keeps its place), else when it will be (one
    released to a later time waits behind those due before it)."""
    return initially if scheduled_at <= now else scheduled_at
