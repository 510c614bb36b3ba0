"""Calls of one kind that arrive while one of that kind is running share the next statement
and transaction (docs/decisions/0023-one-statement-for-many.md).

`Coalesced` is PostgreSQL's group commit done one level up: a caller that finds nothing
of its kind running goes at once, alone (no fixed wait: a lone client's latency does not
rise); callers that arrive meanwhile wait, and when the running one ends, every waiting
caller goes in one call of `together`. The first of them leads it, on its own task (no
task of its own here, so nothing outlives the callers), and hands each of the others its
own outcome.

`together` gets the items in order of arrival and answers one outcome per item, or an
exception for an item that failed alone. An exception from `together` itself (a lost
connection, a bound reached) reaches only the callers of that call; where it says the
statement was rolled back and may succeed alone (`BoundReached`: perhaps one caller's row
was locked), each of its callers runs `alone` instead, as if it had gone by itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from app.domain.errors import StorageUnavailable
from app.storage.connection import BoundReached

# How long the storage's callers wait in line for the running call of their kind and queue:
# a statement takes milliseconds, so a call running this long waits on something (a row
# locked from outside, until the lock bound) and the callers behind it go alone.
PATIENCE_SECONDS = 0.25
# What the callers of a shared call that ended without an answer for them are told.
_OUTCOME_UNKNOWN = "the database call was cut short; its outcome is unknown: retry shortly"

I = TypeVar("I")
O = TypeVar("O")


@dataclass(eq=False)
class _Waiter(Generic[I, O]):
    """An item, and where its caller waits for its turn to lead or for its outcome."""

    item: I
    answer: asyncio.Future[_Lead[I, O] | _Done[O]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


@dataclass(frozen=True)
class _Lead(Generic[I, O]):
    """A waiter's turn to run the next call, for `batch` (itself first)."""

    batch: list[_Waiter[I, O]]


@dataclass(frozen=True)
class _Done(Generic[O]):
    outcome: O | BaseException


class Coalesced(Generic[I, O]):
    """Runs items of one kind: alone when nothing of the kind runs, else together with every
    item that waited for the running call (see the module's docstring). Lives on one event
    loop."""

    def __init__(
        self,
        together: Callable[[Sequence[I]], Awaitable[Sequence[O | BaseException]]],
        alone: Callable[[I], Awaitable[O]],
        group: Callable[[I], Hashable] = lambda _item: None,
        patience: float | None = None,
    ) -> None:
        """`group(item)` names the items that may go together (the storage's: those of one
        queue, so a queue whose rows are locked holds back no other queue's calls, as
        decision 12's turns keep them apart). `patience`: how long a caller waits in line
        for the running call to end (None: as long as it takes); one that waited that long
        goes alone, so a call stuck on a locked row holds back no other call of its group
        for longer."""
        self._together = together
        self._alone = alone
        self._group = group
        self._patience = patience
        self._running: set[Hashable] = set()  # the groups with a call running
        self._waiting: dict[Hashable, list[_Waiter[I, O]]] = {}  # for the call after it
        # One timer per line, from its first caller's arrival: one per call, not per caller.
        self._impatience: dict[Hashable, asyncio.TimerHandle] = {}

    async def __call__(self, item: I) -> O:
        group = self._group(item)
        if group not in self._running:
            self._running.add(group)
            return await self._lead(group, [_Waiter(item)])
        waiter: _Waiter[I, O] = _Waiter(item)
        line = self._waiting.setdefault(group, [])
        line.append(waiter)
        if len(line) == 1 and self._patience is not None:
            self._impatience[group] = asyncio.get_running_loop().call_later(
                self._patience, self._send_alone, group
            )
        try:
            answer = await waiter.answer
        except asyncio.CancelledError:
            # Cancelling the task cancels the future it awaits: a waiter still in line is
            # done (cancelled) by now too, and must leave the line itself.
            line = self._waiting.get(group, [])
            if waiter in line:
                line.remove(waiter)  # never taken: nobody waits on it
            elif isinstance(lead := _result(waiter.answer), _Lead):
                # Made the leader as it was cancelled: the others still go, without it
                # (first in line, with whoever came since).
                self._waiting.setdefault(group, [])[:0] = lead.batch[1:]
                self._hand_on(group)
            raise
        if isinstance(answer, _Lead):
            return await self._lead(group, answer.batch)
        if answer.outcome is _TRY_ALONE:
            return await self._alone(item)
        if isinstance(answer.outcome, BaseException):
            raise answer.outcome
        return answer.outcome

    async def _lead(self, group: Hashable, batch: list[_Waiter[I, O]]) -> O:
        """Run `batch` (its leader first) in one call, then start the next: its leader's
        outcome; each other's goes to its own caller."""
        try:
            if len(batch) == 1:
                outcomes: Sequence[O | BaseException] = [await self._alone(batch[0].item)]
            else:
                try:
                    outcomes = await self._together([waiter.item for waiter in batch])
                except BoundReached:
                    # Perhaps one caller's row was locked: each goes again alone.
                    outcomes = [_TRY_ALONE] * len(batch)
                except Exception as error:  # noqa: BLE001 - it reaches this call's callers
                    outcomes = [error] * len(batch)
        except BaseException:
            # The leader was cancelled (the server stopping): the others of its batch were
            # not, and their calls' outcome is unknown, as after a lost connection.
            for waiter in batch[1:]:
                if not waiter.answer.done():
                    waiter.answer.set_exception(StorageUnavailable(_OUTCOME_UNKNOWN))
            raise
        finally:
            self._hand_on(group)
        if len(outcomes) != len(batch):  # a `together` that answered wrong: nobody is left waiting
            outcomes = [StorageUnavailable(_OUTCOME_UNKNOWN)] * len(batch)
        for waiter, outcome in zip(batch[1:], outcomes[1:], strict=True):
            if not waiter.answer.done():
                waiter.answer.set_result(_Done(outcome))
        mine = outcomes[0]
        if mine is _TRY_ALONE:
            return await self._alone(batch[0].item)
        if isinstance(mine, BaseException):
            raise mine
        return mine

    def _hand_on(self, group: Hashable) -> None:
        """The group's running call ended: its waiting callers' first leads them all, or
        nothing of the group runs.

        A caller cancelled since it got in line, whose task has not yet run to leave it, is
        passed over: its future is cancelled already, and its item goes nowhere."""
        line = self._waiting.pop(group, [])
        if (timer := self._impatience.pop(group, None)) is not None:
            timer.cancel()
        batch = [waiter for waiter in line if not waiter.answer.done()]
        if not batch:
            self._running.discard(group)
            return
        batch[0].answer.set_result(_Lead(batch))

    def _send_alone(self, group: Hashable) -> None:
        """The group's line has waited its patience and the running call goes on (on a row
        locked from outside, say): every caller in it goes alone, as if it had not waited."""
        self._impatience.pop(group, None)
        for waiter in self._waiting.pop(group, []):
            if not waiter.answer.done():
                waiter.answer.set_result(_Done(_TRY_ALONE))


def _result(answer: asyncio.Future[_Lead[I, O] | _Done[O]]) -> _Lead[I, O] | _Done[O] | None:
    """What `answer` was given, or None when it was cancelled or given an exception."""
    if answer.cancelled() or not answer.done() or answer.exception() is not None:
        return None
    return answer.result()


class _TryAlone(Exception):
    """The outcome of an item whose shared call reached a bound: its caller runs it alone."""


_TRY_ALONE = _TryAlone()
