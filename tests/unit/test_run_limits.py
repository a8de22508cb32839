"""Run limits on dispatch plans: what counts toward maxRuns and where the schedule ends. Pure; claims by hand."""

from __future__ import annotations

from dataclasses import replace

from app.domain.states import JobState
from app.scheduler import planning
from app.scheduler.run_limits import limit_runs
from tests.unit.test_planning import T0, at, claim, no_slot, states


def limited(c, now, *, max_runs: int, run_count: int = 0) -> planning.Plan:
    c = replace(c, max_runs=max_runs, run_count=run_count)
    return limit_runs(planning.plan_claim(c, now, no_slot), c)


def test_runs_below_the_limit_are_counted_and_the_schedule_goes_on() -> None:
    plan = limited(claim(kind="cron", cron="*/5 * * * *"), at(0), max_runs=3, run_count=1)
    assert states(plan) == [(T0, "ready", None)]
    assert plan.advance is not None and (plan.advance.state, plan.advance.runs) == (JobState.ACTIVE, 1)
    assert plan.next_due is not None and plan.next_due.nominal_at == at(5)


def test_the_run_that_reaches_the_limit_completes_the_job_with_no_next_occurrence() -> None:
    plan = limited(claim(kind="cron", cron="*/5 * * * *"), at(0), max_runs=3, run_count=2)
    assert states(plan) == [(T0, "ready", None)]
    assert plan.advance is not None and (plan.advance.state, plan.advance.runs) == (JobState.COMPLETED, 1)
    assert plan.next_due is None


def test_a_dry_run_counts_and_a_skipped_occurrence_does_not() -> None:
    dry = replace(claim(kind="cron", cron="*/5 * * * *"), dry_run=True)
    plan = limited(dry, at(0), max_runs=1)
    assert states(plan) == [(T0, "skipped", "dry_run")] and plan.next_due is None
    busy = claim(kind="cron", cron="*/5 * * * *", concurrency="forbid", overlapping=True)
    plan = limited(busy, at(0), max_runs=1)
    assert states(plan) == [(T0, "skipped", "overlap")]
    assert plan.advance is not None and (plan.advance.state, plan.advance.runs) == (JobState.ACTIVE, 0)


def test_a_limit_reached_already_runs_nothing_and_completes() -> None:
    plan = limited(claim(kind="cron", cron="*/5 * * * *"), at(0), max_runs=2, run_count=2)
    assert states(plan) == [] and plan.next_due is None and plan.lag_s is None
    assert plan.advance is not None and plan.advance.state == JobState.COMPLETED


def test_a_job_without_a_limit_or_a_held_plan_is_left_as_planned() -> None:
    c = claim(kind="cron", cron="*/5 * * * *")
    plan = planning.plan_claim(c, at(0), no_slot)
    assert limit_runs(plan, c) is plan and plan.advance is not None and plan.advance.runs == 0
    held = replace(c, concurrency="forbid", max_runs=1)
    early = planning.plan_claim(replace(held, next_run_at=at(1)), at(0), no_slot)
    assert early.held and limit_runs(early, held).next_due is not None
