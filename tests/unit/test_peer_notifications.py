"""What a process tells its peers (decision 19): after a change, only of messages due within
the longest wait, never what a peer told it, and coalesced while a NOTIFY is on its way."""

from __future__ import annotations

import asyncio

from app.queue.notifier import LONGEST_WAIT_MS, Notifier
from app.storage.dialects.postgresql.peers import EVERY_QUEUE, MOST_NAMES_AT_ONCE, PostgresPeers
from tests.conftest import START_MS, FakeClock


class Told:
    def __init__(self) -> None:
        self.queues: list[str | None] = []

    def tell(self, queue: str | None) -> None:
        self.queues.append(queue)


def test_peers_are_told_of_messages_due_within_the_longest_wait_only():
    told, clock = Told(), FakeClock()
    notifier = Notifier(told, clock)
    notifier.notify("now")
    notifier.notify("at-the-edge", START_MS + LONGEST_WAIT_MS)
    notifier.notify("beyond", START_MS + LONGEST_WAIT_MS + 1)
    notifier.notify("past", START_MS - 1000)
    assert told.queues == ["now", "at-the-edge", "past"]


def test_a_change_to_every_queue_is_told_as_one_and_a_peers_news_is_not_told_back():
    told = Told()
    notifier = Notifier(told, FakeClock())
    notifier.notify_every()
    notifier.wake("q")
    notifier.wake(None)
    assert told.queues == [None]


def test_a_wake_up_from_a_peer_wakes_the_polls_of_its_queue_here():
    async def scenario() -> tuple[bool, bool]:
        notifier = Notifier(Told(), FakeClock())
        with notifier.subscription("q"), notifier.subscription("other"):
            ticket, other = notifier.ticket("q"), notifier.ticket("other")
            notifier.wake("q")
            return ticket.is_set(), other.is_set()

    assert asyncio.run(scenario()) == (True, False)


class NoEvents:
    def listener_connected(self, connected: bool) -> None:
        pass

    def listener_reconnected(self) -> None:
        pass

    def peers_told(self, names: int) -> None:
        pass


def test_names_told_meanwhile_go_out_once_each_and_too_many_as_every_queue():
    peers = PostgresPeers({}, lambda queue: None, NoEvents())
    for queue in ("a", "b", "a"):
        peers.tell(queue)
    assert peers._pending == {"a", "b"}
    peers.tell(None)
    peers.tell("c")
    assert peers._pending == {EVERY_QUEUE}

    peers = PostgresPeers({}, lambda queue: None, NoEvents())
    for index in range(MOST_NAMES_AT_ONCE + 5):
        peers.tell(f"q{index}")
    assert peers._pending == {EVERY_QUEUE}
