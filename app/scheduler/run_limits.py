"""Run limits (``maxRuns``, Temporal's remaining actions): a schedule completes once it has started N occurrences.

Applied to each dispatch plan after app.scheduler.planning made it, so the planner's rules stay as they
are. What counts is what the schedule starts: the ready executions a dispatch inserts, and a dry-run
job's recorded occurrences (what would have run, so a dry run ends where the real job would). What does
not count: occurrences recorded as skipped by overlap, misfire or a DST gap (nothing ran), manual runs
and backfills (the tenant's own requests outside the schedule; they stay possible after the limit is
reached, as Temporal's trigger and backfill do). The count is kept on the job (``run_count``,
``JobAddRunsMany``) only while it has a limit, so jobs without one cost nothing more.

The occurrence that reaches the limit is dispatched and completes the job in the same transaction
(no next due row), as an ``endAt`` does; a catch-up that would run past the limit runs the oldest
occurrences up to it and drops the rest.
"""

from __future__ import annotations

from dataclasses import replace

from app.domain.states import ExecutionState, JobState
from app.scheduler.planning import Plan
from app.store import dispatch as store


def _counts(e: store.NewExecution) -> bool:
    return e.state == ExecutionState.READY or e.skip_reason == "dry_run"


def limit_runs(plan: Plan, c: store.Claim) -> Plan:
    """``plan`` with ``c``'s run limit applied: the runs it starts counted, and the job completed (runs
    beyond the limit dropped) when they reach it."""
    if c.max_runs is None or plan.held or plan.advance is None:
        return plan
    left = max(0, c.max_runs - (c.run_count or 0))
    counted = [i for i, e in enumerate(plan.executions) if _counts(e)]
    if len(counted) < left:
        plan.advance = replace(plan.advance, runs=len(counted))
        return plan
    beyond = set(counted[left:])
    plan.executions = [e for i, e in enumerate(plan.executions) if i not in beyond]
    plan.next_due = None
    plan.advance = store.JobAdvance(c.job_id, JobState.COMPLETED, None, None, runs=left)
    if left == 0:  # reached already (a dispatch raced the count): nothing more runs
        plan.replacement = None
        plan.lag_s = None
    return plan
