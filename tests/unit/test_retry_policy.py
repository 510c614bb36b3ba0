"""Retry delays and per-key outcomes: the pure part of decision 14."""

from __future__ import annotations

import random

import pytest

from app.domain.messages import KeyedOutcome, RetryPolicy


class FixedRandom:
    """A random source that always draws `value`."""

    def __init__(self, value: float) -> None:
        self.value = value

    def random(self) -> float:
        return self.value


MIDDLE = FixedRandom(0.5)


def test_the_delay_grows_by_the_multiplier_per_delivery_up_to_the_cap():
    policy = RetryPolicy(initial_delay_ms=1_000, max_delay_ms=20_000, multiplier=3)
    assert [policy.delay_ms(n, MIDDLE) for n in range(1, 6)] == [
        1_000,
        3_000,
        9_000,
        20_000,  # 27 s, capped
        20_000,
    ]


def test_a_multiplier_of_one_keeps_the_delay():
    policy = RetryPolicy(initial_delay_ms=1_500, max_delay_ms=60_000, multiplier=1)
    assert {policy.delay_ms(n, MIDDLE) for n in range(1, 50)} == {1_500}


def test_a_fractional_multiplier_rounds_to_milliseconds():
    policy = RetryPolicy(initial_delay_ms=1_000, max_delay_ms=10_000, multiplier=1.5)
    assert [policy.delay_ms(n, MIDDLE) for n in range(1, 5)] == [1_000, 1_500, 2_250, 3_375]


def test_jitter_spreads_the_delay_either_way_within_its_bounds():
    policy = RetryPolicy(initial_delay_ms=10_000, max_delay_ms=60_000, multiplier=2, jitter=0.25)
    assert policy.delay_ms(2, FixedRandom(0.0)) == 15_000  # 20 s - 25%
    assert policy.delay_ms(2, FixedRandom(1.0)) == 25_000  # 20 s + 25%
    assert policy.delay_ms(2, MIDDLE) == 20_000
    draws = [policy.delay_ms(2, random.Random(seed)) for seed in range(200)]
    assert all(15_000 <= draw <= 25_000 for draw in draws)
    assert len(set(draws)) > 100


def test_the_cap_applies_before_the_jitter():
    """Capping after it would put every message whose spread went past the cap at exactly
    max_delay, together again."""
    policy = RetryPolicy(initial_delay_ms=1_000, max_delay_ms=8_000, multiplier=10, jitter=0.5)
    assert policy.delay_ms(5, FixedRandom(0.0)) == 4_000
    assert policy.delay_ms(5, FixedRandom(1.0)) == 12_000


def test_full_jitter_is_never_negative():
    policy = RetryPolicy(initial_delay_ms=1_000, max_delay_ms=1_000, multiplier=1, jitter=1)
    assert policy.delay_ms(1, FixedRandom(0.0)) == 0
    assert policy.delay_ms(1, FixedRandom(1.0)) == 2_000


@pytest.mark.parametrize("deliveries", [200, 10_000, 10**9])
def test_many_deliveries_stay_at_the_cap_without_overflowing(deliveries):
    policy = RetryPolicy(initial_delay_ms=1, max_delay_ms=3_600_000, multiplier=100)
    assert policy.delay_ms(deliveries, MIDDLE) == 3_600_000


def test_a_message_with_no_delivery_counted_gets_the_initial_delay():
    # Leased before revision 0004 counted deliveries: its count is 0.
    policy = RetryPolicy(initial_delay_ms=1_000, max_delay_ms=10_000, multiplier=2)
    assert policy.delay_ms(0, MIDDLE) == 1_000


def test_keyed_outcomes_keep_the_request_order_and_each_key_once():
    outcome = KeyedOutcome.of(["b", "a", "x", "b", "c", "x"], {"c", "b", "a"})
    assert outcome == KeyedOutcome(done=("b", "a", "c"), missing=("x",))
