"""The adaptive per-origin limit of the HTTP pool (app.executor.limits) and Retry-After parsing."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime

import pytest

from app.executor.http_send import RETRY_AFTER_MAX_S, retry_after_s
from app.executor.limits import AdaptiveLimit
from tests.support.clocks import ManualClock


def window(limit: AdaptiveLimit, clock: ManualClock, latency_s: float, *, in_flight: int | None = None) -> None:
    """One window of answers at ``latency_s`` with ``in_flight`` requests out (default: the whole limit)."""
    limit.sending(limit.current if in_flight is None else in_flight)
    answers = max(4, math.ceil(limit.limit / 4))  # what closes a window
    for _ in range(answers):
        clock.now += latency_s / answers
        limit.succeeded(latency_s)


def test_a_healthy_origin_grows_from_its_start_to_the_ceiling_by_doubling() -> None:
    clock = ManualClock(0.0)
    limit = AdaptiveLimit(start=32, ceiling=256, clock=clock)
    seen = [limit.current]
    for _ in range(4):
        window(limit, clock, 0.005)
        seen.append(limit.current)
    assert seen == [32, 64, 128, 256, 256]


def test_an_origin_that_is_sent_little_keeps_its_limit() -> None:
    clock = ManualClock(0.0)
    limit = AdaptiveLimit(start=32, ceiling=256, clock=clock)
    for _ in range(5):
        window(limit, clock, 0.005, in_flight=3)
    assert limit.current == 32


def test_congestion_halves_at_once_then_growth_is_additive() -> None:
    clock = ManualClock(0.0)
    limit = AdaptiveLimit(start=64, ceiling=256, clock=clock)
    limit.congested(0.01)
    assert limit.current == 32 and not limit.slow_start
    limit.congested(0.01)  # the same window: halved once only
    assert limit.current == 32
    clock.now += 1.0
    limit.succeeded(0.01)  # closes the congested window without growing
    window(limit, clock, 0.01)
    assert 32 < limit.current <= 32 + 6  # sqrt(32), not a doubling


def test_latency_far_over_the_baseline_shrinks_the_limit_and_floor_holds() -> None:
    clock = ManualClock(0.0)
    limit = AdaptiveLimit(start=100, ceiling=256, floor=4, clock=clock)
    window(limit, clock, 0.005, in_flight=10)  # baseline ~5 ms, not binding: no growth
    assert limit.current == 100
    window(limit, clock, 0.2, in_flight=10)  # 40x the baseline
    assert limit.current == 90
    for _ in range(200):
        limit.congested(1.0)
        clock.now += 1.0
        limit.succeeded(1.0)
    assert limit.current == 4


def test_retry_after_pauses_the_origin() -> None:
    clock = ManualClock(0.0)
    limit = AdaptiveLimit(start=8, ceiling=8, clock=clock)
    assert limit.paused_for() is None
    limit.congested(0.01, retry_after_s=30)
    assert limit.paused_for() == pytest.approx(30)
    clock.now += 31
    assert limit.paused_for() is None


def test_bad_bounds_are_refused() -> None:
    with pytest.raises(ValueError):
        AdaptiveLimit(start=1, ceiling=0)


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2026, 12, 7, tzinfo=timezone.utc)
    assert retry_after_s("120") == 120
    assert retry_after_s(format_datetime(now + timedelta(seconds=90), usegmt=True), now.timestamp()) == 90
    assert retry_after_s(format_datetime(now - timedelta(seconds=90), usegmt=True), now.timestamp()) == 0
    assert retry_after_s("999999999") == RETRY_AFTER_MAX_S
    assert retry_after_s(None) is None and retry_after_s("soon") is None and retry_after_s("-5") is None


def test_an_idle_origin_starts_a_new_slow_start_from_what_it_learned() -> None:
    clock = ManualClock(0.0)
    limit = AdaptiveLimit(start=32, ceiling=256, clock=clock)
    for _ in range(3):
        window(limit, clock, 0.005)
    assert limit.current == 256
    limit.congested(0.01)  # 128, and slow start is over
    clock.now += 1.0
    limit.succeeded(0.01)
    assert limit.current == 128 and not limit.slow_start
    clock.now += 120  # an hour's herd later, say
    limit.sending(1)
    assert limit.slow_start and limit.current == 128
    window(limit, clock, 0.005)
    assert limit.current == 256
