"""Token buckets (app.domain.limits): the submit rate per tenant and failed logins per address."""

from __future__ import annotations

import pytest

from app.domain.limits import Taken, TokenBuckets


def test_a_full_bucket_grants_its_capacity_then_refills_at_its_rate() -> None:
    b = TokenBuckets()
    assert b.take("t", 3, capacity=5, rate_per_s=5, now=0.0) == Taken(3, 0.0)
    assert b.take("t", 3, capacity=5, rate_per_s=5, now=0.0) == Taken(2, 0.0)  # partial: what is left
    refused = b.take("t", 1, capacity=5, rate_per_s=5, now=0.0)
    assert refused.granted == 0 and refused.retry_after_s == pytest.approx(0.2)
    assert b.take("t", 1, capacity=5, rate_per_s=5, now=0.2).granted == 1
    assert b.take("t", 10, capacity=5, rate_per_s=5, now=100.0).granted == 5  # never more than the capacity


def test_all_or_nothing_waits_for_the_whole_amount() -> None:
    b = TokenBuckets()
    b.take("t", 4, capacity=4, rate_per_s=2, now=0.0)
    taken = b.take("t", 3, capacity=4, rate_per_s=2, now=0.5, partial=False)
    assert taken == Taken(0, pytest.approx(1.0))
    assert b.take("t", 3, capacity=4, rate_per_s=2, now=1.5, partial=False).granted == 3


def test_keys_are_independent_and_full_buckets_keep_no_entry() -> None:
    b = TokenBuckets()
    b.take("a", 2, capacity=2, rate_per_s=1, now=0.0)
    assert b.take("b", 2, capacity=2, rate_per_s=1, now=0.0).granted == 2
    assert len(b) == 2
    b.take("a", 1, capacity=2, rate_per_s=1, now=10.0)  # refilled, then one spent
    assert b.tokens("a", capacity=2, rate_per_s=1, now=10.0) == 1
    assert b.wait_s("b", capacity=2, rate_per_s=1, now=0.0) == pytest.approx(1.0)
    assert b.wait_s("nobody", capacity=2, rate_per_s=1, now=0.0) == 0


def test_a_lowered_capacity_applies_at_once() -> None:
    b = TokenBuckets()
    b.take("t", 1, capacity=100, rate_per_s=100, now=0.0)
    assert b.take("t", 100, capacity=2, rate_per_s=2, now=0.0).granted == 2


def test_spend_goes_below_zero_and_the_debt_is_waited_out() -> None:
    b = TokenBuckets()
    assert b.spend("ip", capacity=2, rate_per_s=1, now=0.0) == 1
    assert b.spend("ip", capacity=2, rate_per_s=1, now=0.0) == 0
    assert b.spend("ip", capacity=2, rate_per_s=1, now=0.0) == -1
    assert b.wait_s("ip", capacity=2, rate_per_s=1, now=0.0) == pytest.approx(2.0)
    assert b.wait_s("ip", capacity=2, rate_per_s=1, now=2.0) == 0


def test_the_table_stays_bounded_dropping_the_least_recently_used() -> None:
    b = TokenBuckets(max_keys=10)
    for i in range(10):
        b.spend(i, capacity=5, rate_per_s=1, now=0.0)
    b.spend(0, capacity=5, rate_per_s=1, now=0.0)  # key 0 used again: 1 is now the oldest
    b.spend("new", capacity=5, rate_per_s=1, now=0.0)
    assert len(b) == 10
    assert b.tokens(0, capacity=5, rate_per_s=1, now=0.0) == 3
    assert b.tokens(1, capacity=5, rate_per_s=1, now=0.0) == 5  # evicted: back to a full bucket


def test_bad_bucket_shapes_are_refused() -> None:
    with pytest.raises(ValueError):
        TokenBuckets().take("t", 1, capacity=0, rate_per_s=1, now=0.0)
    with pytest.raises(ValueError):
        TokenBuckets().take("t", 1, capacity=1, rate_per_s=0, now=0.0)
    with pytest.raises(ValueError):
        TokenBuckets(max_keys=0)
