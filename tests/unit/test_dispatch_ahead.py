"""The dispatch-ahead window (app.scheduler.ahead): how early a herd is dispatched. Pure."""

from __future__ import annotations

import pytest

from app.scheduler.ahead import MIN_SPELL_ENTRIES, AheadWindow, DispatchRate

NOW = 1_000_000.0


def test_few_entries_are_dispatched_the_minimum_ahead() -> None:
    plan = AheadWindow(5.0, 30.0).plan(NOW, [(NOW + 1, 10), (NOW + 10, 20)], rate_per_s=1_000)
    assert plan.ahead_s == pytest.approx(5.01)  # the first span's 10 entries take 0.01 s
    assert plan.recheck_ts == pytest.approx(NOW + 10 - 5.03)  # when the second span must start


def test_a_herd_starts_as_early_as_its_size_at_the_measured_rate_needs() -> None:
    window = AheadWindow(5.0, 30.0)
    herd = [(NOW + 1, 100), (NOW + 20, 100_000)]
    assert window.plan(NOW, herd, rate_per_s=10_000).ahead_s == pytest.approx(5.01)  # 20 s > 5 + 10.01 s
    later = NOW + 20 - 15.01
    assert window.plan(NOW, herd, rate_per_s=10_000).recheck_ts == pytest.approx(later)
    assert window.plan(later + 0.001, herd, rate_per_s=10_000).ahead_s == pytest.approx(15.01)  # reaches the herd
    assert window.plan(NOW, herd, rate_per_s=1_000).ahead_s == 30.0  # never beyond the most


def test_the_window_refuses_a_minimum_above_its_most() -> None:
    with pytest.raises(ValueError, match="min_s <= max_s"):
        AheadWindow(10.0, 5.0)


def test_the_rate_is_measured_over_spells_of_backlog_only() -> None:
    rate = DispatchRate(prior_per_s=2_000)
    rate.popped(0.0, 5_000, backlog=False)  # no backlog: not a spell
    rate.idle(10.0)
    assert (rate.per_s, rate.measured) == (2_000, False)
    rate.popped(10.0, 6_000, backlog=True)
    rate.popped(10.5, 2_000, backlog=True)
    rate.popped(11.0, 500, backlog=False)  # the tail of the spell counts
    rate.idle(12.0)
    assert (rate.per_s, rate.measured) == (4_250, True)
    rate.popped(20.0, 8_000, backlog=True)
    rate.idle(21.0)
    assert rate.per_s == pytest.approx(0.5 * 8_000 + 0.5 * 4_250)
    rate.popped(30.0, MIN_SPELL_ENTRIES - 1, backlog=True)  # too few to say anything
    rate.idle(30.1)
    assert rate.per_s == pytest.approx(6_125)
