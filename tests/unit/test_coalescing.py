"""`Coalesced` on its own (app/storage/coalescing.py): who runs alone, who goes together, in
what order, and who gets which outcome or failure, with fakes the test holds and lets go.

No database and no time: each fake call waits on an asyncio.Event until the test answers it,
and a test waits for the coalescer's next call, or a caller's answer, with a timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

import pytest

from app.domain.errors import StorageUnavailable
from app.storage.coalescing import Coalesced
from app.storage.connection import BoundReached

# How long a test waits for something that should happen at once (a failure, not a pace).
TIMEOUT = 5


class Call:
    """One call of a fake: `kind` ("alone" or "together") and its items, held until the test
    answers it (an outcome, or an exception raised from the call)."""

    def __init__(self, kind: str, items: list[str]) -> None:
        self.kind = kind
        self.items = items
        self._answered = asyncio.Event()
        self._answer: Any = None

    def answer(self, answer: Any) -> None:
        """Let the call end: return `answer`, or raise it when it is an exception."""
        self._answer = answer
        self._answered.set()

    async def wait(self) -> Any:
        await self._answered.wait()
        if isinstance(self._answer, BaseException):
            raise self._answer
        return self._answer


class Fakes:
    """`together` and `alone` for a Coalesced, recording each call as it is entered."""

    def __init__(self) -> None:
        self.entered: list[tuple[str, list[str]]] = []
        self._calls: asyncio.Queue[Call] = asyncio.Queue()

    async def alone(self, item: str) -> str:
        return await self._call("alone", [item])

    async def together(self, items: Sequence[str]) -> Sequence[str | BaseException]:
        return await self._call("together", list(items))

    async def _call(self, kind: str, items: list[str]) -> Any:
        # Recorded before the first await: "entered" means entered within the caller's step.
        self.entered.append((kind, items))
        call = Call(kind, items)
        self._calls.put_nowait(call)
        return await call.wait()

    async def next_call(self) -> Call:
        """The coalescer's next call of either fake, once it is made."""
        return await asyncio.wait_for(self._calls.get(), TIMEOUT)

    def no_call_waiting(self) -> bool:
        return self._calls.empty()


def run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(asyncio.wait_for(scenario(), 4 * TIMEOUT))


async def one_pass() -> None:
    """One pass of the event loop, no time: every task made ready before this runs up to
    its next await (asyncio runs ready callbacks in order). Used only to let new callers
    reach the coalescer; everything else is waited for on events."""
    await asyncio.sleep(0)


async def callers(coalesced: Coalesced[str, str], *items: str) -> list[asyncio.Task[str]]:
    """A task per item calling `coalesced`, in this order, each up to its first await."""
    tasks = [asyncio.create_task(coalesced(item)) for item in items]
    await one_pass()
    return tasks


async def outcome(task: Awaitable[str]) -> str:
    return await asyncio.wait_for(task, TIMEOUT)


async def runs_alone_at_once(coalesced: Coalesced[str, str], fakes: Fakes, item: str) -> None:
    """`item`'s caller, arriving with nothing running, calls `alone` within its first step
    (before the event loop could run anything else) and gets alone's outcome."""
    before = len(fakes.entered)
    caller = asyncio.create_task(coalesced(item))
    await one_pass()
    # A linger of any length (even one pass: a sleep(0) before `alone`) would leave the
    # caller short of `alone` here.
    assert fakes.entered[before:] == [("alone", [item])]
    call = await fakes.next_call()
    call.answer(f"alone:{item}")
    assert await outcome(caller) == f"alone:{item}"
    assert fakes.no_call_waiting()


def test_a_lone_caller_runs_alone_before_it_first_yields():
    """The strictest form of "no fixed linger": driven by hand, the caller's coroutine has
    called `alone` by the time it first gives the event loop a turn. Broken by any wait
    before `alone` (a sleep, an Event to gather others), or by running a lone item through
    `together`."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        caller = coalesced("a")
        caller.send(None)  # up to its first suspension, with no other task in between
        assert fakes.entered == [("alone", ["a"])]
        call = await fakes.next_call()
        call.answer("alone:a")
        with pytest.raises(StopIteration) as returned:
            caller.send(None)
        assert returned.value.value == "alone:a"
        # Nothing runs any more: the next caller is alone too.
        await runs_alone_at_once(coalesced, fakes, "b")

    run(scenario)


def test_callers_arriving_while_one_runs_go_together_in_order_each_with_its_outcome():
    """Broken by a call per waiting caller, by items out of arrival order, or by outcomes
    handed to the wrong callers (each outcome names its own item here)."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        [first] = await callers(coalesced, "a")
        running = await fakes.next_call()
        waiting = await callers(coalesced, "b", "c", "d", "e")
        assert fakes.no_call_waiting()  # they wait for the running one
        running.answer("alone:a")
        shared = await fakes.next_call()
        assert (shared.kind, shared.items) == ("together", ["b", "c", "d", "e"])
        shared.answer([f"together:{item}" for item in shared.items])
        assert await outcome(first) == "alone:a"
        assert [await outcome(task) for task in waiting] == [
            "together:b",
            "together:c",
            "together:d",
            "together:e",
        ]
        assert fakes.entered == [("alone", ["a"]), ("together", ["b", "c", "d", "e"])]
        await runs_alone_at_once(coalesced, fakes, "f")

    run(scenario)


def test_an_item_that_failed_fails_only_its_own_caller():
    """`together` answers an exception for some items (the leader's among them): each
    reaches that item's caller, the others get their outcomes. Broken by raising an item's
    failure for the whole batch, or by handing it to a neighbour."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        await callers(coalesced, "a")
        running = await fakes.next_call()
        leader, middle, failing, last = await callers(coalesced, "b", "c", "d", "e")
        running.answer("alone:a")
        shared = await fakes.next_call()
        leaders_failure, own_failure = KeyError("b's own"), ValueError("d's own")
        shared.answer([leaders_failure, "together:c", own_failure, "together:e"])
        with pytest.raises(KeyError) as raised:
            await outcome(leader)
        assert raised.value is leaders_failure
        assert await outcome(middle) == "together:c"
        with pytest.raises(ValueError) as raised:
            await outcome(failing)
        assert raised.value is own_failure
        assert await outcome(last) == "together:e"
        await runs_alone_at_once(coalesced, fakes, "f")

    run(scenario)


def test_a_failure_of_the_shared_call_reaches_its_callers_and_not_the_next_batch():
    """`together` itself fails (a lost connection): exactly its callers get the error; those
    that arrived meanwhile go in the next call and get their outcomes. Broken by failing
    the waiting callers too, or by dropping them with the failed batch."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        [first] = await callers(coalesced, "a")
        running = await fakes.next_call()
        failed = await callers(coalesced, "b", "c")
        running.answer("alone:a")
        shared = await fakes.next_call()
        assert shared.items == ["b", "c"]
        later = await callers(coalesced, "d", "e", "f")  # while b and c's call runs
        lost = StorageUnavailable("the database is unavailable; retry shortly")
        shared.answer(lost)
        for task in failed:
            with pytest.raises(StorageUnavailable) as raised:
                await outcome(task)
            assert raised.value is lost
        following = await fakes.next_call()
        assert (following.kind, following.items) == ("together", ["d", "e", "f"])
        following.answer([f"together:{item}" for item in following.items])
        assert [await outcome(task) for task in later] == [
            "together:d",
            "together:e",
            "together:f",
        ]
        assert await outcome(first) == "alone:a"
        await runs_alone_at_once(coalesced, fakes, "g")

    run(scenario)


def test_a_bound_reached_by_the_shared_call_sends_each_caller_alone():
    """BoundReached (a lock timeout: perhaps one caller's row was locked) from `together`:
    each of its callers runs `alone`, as if it had come by itself, and gets that outcome or
    failure, its own. Broken by answering the bound to every caller (one locked row would
    fail the whole batch), or by running only some of them again."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        await callers(coalesced, "a")
        running = await fakes.next_call()
        b, c, d = await callers(coalesced, "b", "c", "d")
        running.answer("alone:a")
        shared = await fakes.next_call()
        shared.answer(BoundReached("the database is busy: a lock or statement bound was reached"))
        again = {}
        for _ in range(3):
            call = await fakes.next_call()
            assert call.kind == "alone"
            [item] = call.items
            again[item] = call
        assert sorted(again) == ["b", "c", "d"]
        assert fakes.no_call_waiting()
        own = BoundReached("c's row is still locked")
        again["b"].answer("alone:b")
        again["c"].answer(own)
        again["d"].answer("alone:d")
        assert await outcome(b) == "alone:b"
        with pytest.raises(BoundReached) as raised:
            await outcome(c)
        assert raised.value is own
        assert await outcome(d) == "alone:d"
        await runs_alone_at_once(coalesced, fakes, "e")

    run(scenario)


def test_callers_arriving_during_a_batch_go_in_the_next_one():
    """Broken by adding them to the running call's items after it started, by running them
    alone beside it, or by leaving them waiting once it ends."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        await callers(coalesced, "a")
        running = await fakes.next_call()
        first_batch = await callers(coalesced, "b", "c")
        running.answer("alone:a")
        shared = await fakes.next_call()
        second_batch = await callers(coalesced, "d", "e")
        assert fakes.no_call_waiting()
        shared.answer(["together:b", "together:c"])
        following = await fakes.next_call()
        assert following.items == ["d", "e"]
        third_batch = await callers(coalesced, "f")  # alone among the waiting: still waits
        assert fakes.no_call_waiting()
        following.answer(["together:d", "together:e"])
        last = await fakes.next_call()
        assert (last.kind, last.items) == ("alone", ["f"])  # a batch of one goes alone
        last.answer("alone:f")
        assert [await outcome(task) for task in first_batch + second_batch + third_batch] == [
            "together:b",
            "together:c",
            "together:d",
            "together:e",
            "alone:f",
        ]
        await runs_alone_at_once(coalesced, fakes, "g")

    run(scenario)


@pytest.mark.parametrize("cancelled", ["b", "c", "d"])
def test_a_waiter_cancelled_before_its_turn_is_dropped_and_the_others_go(cancelled):
    """A caller cancelled while it waits (its client gone): its item is not sent, and the
    others go together as if it had never come, whatever its place in line. Broken by
    leaving it in line: first in line, its cancelled future cannot be handed the lead (the
    others then wait for ever); elsewhere, its item would still be written."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        await callers(coalesced, "a")
        running = await fakes.next_call()
        tasks = dict(zip("bcd", await callers(coalesced, "b", "c", "d"), strict=True))
        tasks[cancelled].cancel()
        with pytest.raises(asyncio.CancelledError):
            await outcome(tasks.pop(cancelled))
        running.answer("alone:a")
        shared = await fakes.next_call()
        assert (shared.kind, shared.items) == ("together", list(tasks))
        shared.answer([f"together:{item}" for item in shared.items])
        assert {item: await outcome(task) for item, task in tasks.items()} == {
            item: f"together:{item}" for item in tasks
        }
        await runs_alone_at_once(coalesced, fakes, "e")

    run(scenario)


def test_the_only_waiter_cancelled_leaves_the_coalescer_idle():
    """Broken by handing the lead to the cancelled caller (nothing would run again: every
    later caller would wait for ever)."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        await callers(coalesced, "a")
        running = await fakes.next_call()
        [waiting] = await callers(coalesced, "b")
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outcome(waiting)
        running.answer("alone:a")
        await runs_alone_at_once(coalesced, fakes, "c")
        assert fakes.entered == [("alone", ["a"]), ("alone", ["c"])]

    run(scenario)


@pytest.mark.parametrize(
    "others", [["c", "d"], ["c"], []], ids=["two-others", "one-other", "nobody-else"]
)
def test_a_waiter_cancelled_just_as_it_is_made_leader_lets_the_others_run(others):
    """The running call ends and hands the lead to the first waiter, whose cancellation lands
    in the same pass of the event loop, before it could run: the rest of its batch still
    goes (alone when one is left), and with nobody left the coalescer is idle. Broken by
    dropping the batch with its would-be leader (its callers would wait for ever)."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        await callers(coalesced, "a")
        running = await fakes.next_call()
        would_lead, *rest = await callers(coalesced, "b", *others)
        # Answered now, `running`'s caller resumes in the next pass and hands `b` the lead;
        # the cancellation, queued behind it, lands before `b` resumes.
        running.answer("alone:a")
        asyncio.get_running_loop().call_soon(would_lead.cancel)
        with pytest.raises(asyncio.CancelledError):
            await outcome(would_lead)
        if len(others) > 1:
            shared = await fakes.next_call()
            assert (shared.kind, shared.items) == ("together", others)
            shared.answer([f"together:{item}" for item in others])
            assert [await outcome(task) for task in rest] == [f"together:{o}" for o in others]
        elif others:
            alone = await fakes.next_call()
            assert (alone.kind, alone.items) == ("alone", others)
            alone.answer(f"alone:{others[0]}")
            assert await outcome(rest[0]) == f"alone:{others[0]}"
        assert ("together", ["b", *others]) not in fakes.entered  # b never led
        await runs_alone_at_once(coalesced, fakes, "e")

    run(scenario)


def test_a_leader_cancelled_while_it_runs_alone_lets_the_waiting_go():
    """Broken by ending the running call without handing on (the waiting callers would
    wait for ever, and nothing would run again)."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        [first] = await callers(coalesced, "a")
        await fakes.next_call()  # never answered
        waiting = await callers(coalesced, "b", "c")
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outcome(first)
        shared = await fakes.next_call()
        assert (shared.kind, shared.items) == ("together", ["b", "c"])
        shared.answer(["together:b", "together:c"])
        assert [await outcome(task) for task in waiting] == ["together:b", "together:c"]
        await runs_alone_at_once(coalesced, fakes, "d")

    run(scenario)


def test_a_leader_cancelled_during_the_shared_call_ends_its_batch_and_the_next_goes():
    """The leader of a shared call is cancelled (the server stopping): the call is given up,
    its other callers, not cancelled themselves, end with StorageUnavailable (a 503: the
    outcome is unknown, as after a lost connection) rather than waiting for an outcome that
    will never come or ending as cancelled (a 500), and callers that arrived meanwhile go
    next. Broken by leaving the batch's callers waiting, by handing them the leader's
    cancellation, or by not handing on."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone)
        await callers(coalesced, "a")
        running = await fakes.next_call()
        leader, follower = await callers(coalesced, "b", "c")
        running.answer("alone:a")
        shared = await fakes.next_call()
        assert shared.items == ["b", "c"]
        later = await callers(coalesced, "d", "e")
        leader.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outcome(leader)
        with pytest.raises(StorageUnavailable):
            await outcome(follower)
        following = await fakes.next_call()
        assert (following.kind, following.items) == ("together", ["d", "e"])
        following.answer(["together:d", "together:e"])
        assert [await outcome(task) for task in later] == ["together:d", "together:e"]
        await runs_alone_at_once(coalesced, fakes, "f")

    run(scenario)


def test_callers_in_line_past_their_patience_go_alone_while_the_running_call_is_stuck():
    """A call stuck on a locked row (it runs until the lock bound) holds back the callers in
    line behind it for no longer than their patience: then each goes alone, as if the stuck
    call were not there, and the stuck one ends as it ends. Broken by a line that waits for
    the running call however long it takes (one locked row would hold back its queue's
    every acknowledgement for the lock bound), or by a caller that leaves the line and
    still goes in the next batch."""

    async def scenario() -> None:
        fakes = Fakes()
        coalesced = Coalesced(fakes.together, fakes.alone, patience=0.05)
        await callers(coalesced, "a")
        stuck = await fakes.next_call()
        b, c = await callers(coalesced, "b", "c")
        gone_alone = {}
        for _ in range(2):
            call = await fakes.next_call()  # each after its patience, "a" still running
            assert call.kind == "alone"
            [item] = call.items
            gone_alone[item] = call
        assert sorted(gone_alone) == ["b", "c"]
        gone_alone["b"].answer("alone:b")
        gone_alone["c"].answer("alone:c")
        assert [await outcome(b), await outcome(c)] == ["alone:b", "alone:c"]
        stuck.answer("alone:a")
        await one_pass()
        assert fakes.no_call_waiting()  # nobody was left in line for a next batch
        await runs_alone_at_once(coalesced, fakes, "d")

    run(scenario)
