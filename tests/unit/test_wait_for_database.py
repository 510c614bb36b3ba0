"""Waiting for the database at start-up (app/storage/startup.py), on a fake clock: how often
it tries, what it says and when, when it gives up."""

from __future__ import annotations

import itertools

import pytest

from app.storage.startup import (
    MOST_RETRY_SECONDS,
    DatabaseRefused,
    DatabaseUnreachable,
    DatabaseUrl,
    wait_for_database,
)

DATABASE = DatabaseUrl("postgresql+psycopg://app:pw@db:5432/hourglass")


class Database:
    """Does not answer until `up_at` (fake seconds), then answers (or refuses)."""

    def __init__(self, up_at: float, refuses: bool = False) -> None:
        self.now = 0.0
        self.up_at = up_at
        self.refuses = refuses
        self.tries: list[float] = []
        self.said: list[tuple[float, str]] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds > 0
        self.now += seconds

    def say(self, line: str) -> None:
        self.said.append((self.now, line))

    def check(self, database: DatabaseUrl) -> None:
        assert database is DATABASE
        self.tries.append(self.now)
        if self.refuses:
            raise DatabaseRefused("refused: password authentication failed", "password")
        if self.now < self.up_at:
            raise DatabaseUnreachable("does not answer: Connection refused", "Connection refused")

    def wait(self, seconds: float) -> None:
        wait_for_database(
            DATABASE, seconds, say=self.say, check=self.check, clock=self.clock, sleep=self.sleep
        )


def test_it_tries_again_backing_off_and_goes_on_once_the_database_answers():
    database = Database(up_at=30.0)
    database.wait(60)
    gaps = [later - earlier for earlier, later in zip(database.tries, database.tries[1:])]
    assert gaps[:4] == [0.25, 0.5, 1.0, 2.0]
    assert set(gaps[4:]) == {MOST_RETRY_SECONDS}
    assert 30.0 <= database.tries[-1] < 30.0 + MOST_RETRY_SECONDS


def test_it_says_why_it_waits_every_five_seconds_and_when_the_database_answers():
    database = Database(up_at=30.0)
    database.wait(60)
    times = [at for at, _ in database.said[:-1]]
    assert times[0] == 0.0
    assert all(
        4.99 < later - earlier < 5.0 + MOST_RETRY_SECONDS
        for earlier, later in itertools.pairwise(times)
    )
    assert len(times) == 6  # 0 s, then about every 5 s up to 30 s
    assert database.said[0][1] == (
        "waiting for the database at postgresql+psycopg://app:***@db:5432/hourglass: "
        "Connection refused (0 s of 60)"
    )
    assert database.said[-1][1].startswith("the database at postgresql+psycopg://app:***@db")
    assert "pw" not in "".join(line for _, line in database.said)


def test_a_database_that_answers_at_once_is_not_waited_for_and_nothing_is_said():
    database = Database(up_at=0.0)
    database.wait(60)
    assert database.tries == [0.0]
    assert database.said == []


def test_it_gives_up_when_the_time_is_out_saying_how_long_it_waited():
    database = Database(up_at=float("inf"))
    with pytest.raises(DatabaseUnreachable) as given_up:
        database.wait(10)
    assert str(given_up.value) == "does not answer: Connection refused (waited 10 s)"
    assert database.tries[-1] == 10.0  # the last try at the deadline, none after it


def test_without_a_wait_one_try_and_the_error_as_it_is():
    database = Database(up_at=float("inf"))
    with pytest.raises(DatabaseUnreachable, match=r"^does not answer: Connection refused$"):
        database.wait(0)
    assert database.tries == [0.0]
    assert database.said == []


def test_a_database_that_refuses_is_not_waited_for():
    database = Database(up_at=0.0, refuses=True)
    with pytest.raises(DatabaseRefused):
        database.wait(60)
    assert database.tries == [0.0]
