"""Dispatch planning: what one claimed due row turns into. Pure; claims are built by hand."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from uuid import UUID

from app.domain import jobs
from app.domain.queues import tenant_queue
from app.domain.shards import due_minute, shard_of
from app.scheduler import planning
from app.store.dispatch import Claim

UTC = timezone.utc
TENANT = UUID("00000000-0000-4000-8000-000000000001")
JOB = UUID("00000000-0000-4000-8000-0000000000aa")
QUEUE = tenant_queue(TENANT, "work")
T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def claim(
    *,
    nominal: datetime = T0,
    run_at: datetime | None = None,
    kind: str = "once",
    cron: str | None = None,
    concurrency: str = "allow",
    misfire: str = "run_once",
    overlapping: bool = False,
    state: str | None = "active",
) -> Claim:
    run_at = nominal if run_at is None else run_at
    return Claim(
        shard_id=shard_of(JOB),
        next_run_at=run_at,
        job_id=JOB,
        claimed=True,
        fenced=False,
        tenant_id=TENANT,
        nominal_at=nominal,
        job_state=state,
        schedule_kind=kind,
        cron_resolved=cron,
        tz="UTC" if cron else None,
        jitter_s=0 if cron else None,
        dst_gap="shift" if cron else None,
        dst_repeat="once" if cron else None,
        concurrency=concurrency,
        misfire=misfire,
        queue=QUEUE,
        max_attempts=3,
        overlapping=overlapping,
    )


def no_slot(tenant_id: UUID) -> datetime:
    raise AssertionError("only catch_up asks for a slot")


def states(plan: planning.Plan) -> list[tuple[datetime, str, str | None]]:
    return [(e.scheduled_for, e.state, e.skip_reason) for e in plan.executions]


def test_a_one_off_runs_once_and_completes_the_job() -> None:
    plan = planning.plan_claim(claim(), at(0.5), no_slot)
    assert states(plan) == [(T0, "ready", None)]
    [execution] = plan.executions
    assert (execution.job_id, execution.tenant_id, execution.queue, execution.ready_at) == (JOB, TENANT, QUEUE, T0)
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "completed", None, None)
    assert plan.next_due is None and plan.replacement is None and not plan.held
    assert plan.lag_s == 30.0


def test_a_job_no_longer_active_plans_nothing() -> None:
    for state in ("paused", "cancelled", "completed", None):
        plan = planning.plan_claim(claim(state=state), at(1), no_slot)
        assert plan == planning.Plan()


def test_a_cron_step_runs_the_occurrence_and_moves_the_due_row_to_the_next() -> None:
    plan = planning.plan_claim(claim(kind="cron", cron="*/5 * * * *"), at(0.25), no_slot)
    assert states(plan) == [(T0, "ready", None)]
    assert plan.next_due == planning.dispatch_store.NextDue(shard_of(JOB), due_minute(at(5)), at(5), JOB, TENANT, at(5))
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "active", at(5), at(5))


def test_forbid_skips_an_occurrence_while_the_previous_execution_is_unfinished() -> None:
    plan = planning.plan_claim(
        claim(kind="cron", cron="*/5 * * * *", concurrency="forbid", overlapping=True), at(0), no_slot
    )
    assert states(plan) == [(T0, "skipped", "overlap")]
    assert plan.next_due is not None and plan.next_due.nominal_at == at(5)  # the chain goes on
    assert plan.replacement is None and plan.lag_s is None


def test_replace_cancels_the_unfinished_execution_and_runs() -> None:
    plan = planning.plan_claim(claim(concurrency="replace", overlapping=True), at(0), no_slot)
    assert states(plan) == [(T0, "ready", None)]
    assert plan.replacement == planning.dispatch_store.Replacement(JOB, T0, "replaced by 2026-11-30T10:00:00Z")


def test_overlap_policies_are_applied_at_the_due_time_not_when_dispatched_ahead() -> None:
    for concurrency in ("forbid", "replace"):
        early = claim(kind="cron", cron="*/5 * * * *", concurrency=concurrency, overlapping=False)
        plan = planning.plan_claim(early, T0 - timedelta(seconds=3), no_slot)
        assert plan.held
        assert plan.next_due == planning.dispatch_store.NextDue(early.shard_id, due_minute(T0), T0, JOB, TENANT, T0)
        assert plan.executions == [] and plan.advance is None and plan.replacement is None
        assert not planning.plan_claim(early, T0, no_slot).held  # at its due time it is planned
    # allow is dispatched ahead: ready at its due time.
    ahead = planning.plan_claim(claim(), T0 - timedelta(seconds=3), no_slot)
    assert not ahead.held and states(ahead) == [(T0, "ready", None)] and ahead.executions[0].ready_at == T0
    assert ahead.lag_s == 0.0


def missed(misfire: str, slot=no_slot) -> planning.Plan:
    # Due at 10:00, planned at 10:17: 10:05, 10:10 and 10:15 were missed too.
    return planning.plan_claim(claim(kind="cron", cron="*/5 * * * *", misfire=misfire), at(17), slot)


def test_misfire_run_once_runs_the_newest_and_records_the_rest() -> None:
    plan = missed("run_once")
    assert states(plan) == [
        (at(0), "skipped", "misfire"),
        (at(5), "skipped", "misfire"),
        (at(10), "skipped", "misfire"),
        (at(15), "ready", None),
    ]
    assert "misfire policy run_once" in (plan.executions[0].note or "")
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "active", at(20), at(20))
    assert plan.lag_s is None  # not the claimed occurrence alone


def test_misfire_catch_up_runs_every_missed_occurrence_at_the_tenant_pace() -> None:
    slots = iter(at(17) + timedelta(seconds=i) for i in range(10))
    plan = missed("catch_up", lambda tenant_id: next(slots))
    assert states(plan) == [(at(m), "ready", None) for m in (0, 5, 10, 15)]
    assert [e.ready_at for e in plan.executions] == [at(17) + timedelta(seconds=i) for i in range(4)]
    assert plan.next_due is not None and plan.next_due.nominal_at == at(20)


def test_misfire_skip_runs_none() -> None:
    plan = missed("skip")
    assert states(plan) == [(at(m), "skipped", "misfire") for m in (0, 5, 10, 15)]
    assert plan.next_due is not None and plan.next_due.nominal_at == at(20)


def test_misfire_keeps_at_most_the_cap_and_says_how_many_it_left_out() -> None:
    plan = planning.plan_claim(claim(kind="cron", cron="* * * * *", misfire="skip"), at(150), no_slot)
    assert len(plan.executions) == planning.MISFIRE_CAP
    assert "older missed occurrences" in (plan.executions[0].note or "")


def test_a_dst_gap_skip_is_recorded_before_the_next_occurrence() -> None:
    # 02:30 does not exist in New York on 2026-03-08; with gap skip it is recorded, not run.
    nominal = datetime(2026, 3, 7, 7, 30, tzinfo=UTC)  # 02:30 EST on the 7th
    c = replace(claim(kind="cron", cron="30 2 * * *", nominal=nominal), tz="America/New_York", dst_gap="skip")
    plan = planning.plan_claim(c, nominal, no_slot)
    gap = datetime(2026, 3, 8, 7, 0, tzinfo=UTC)  # where the gap ends: 03:00 EDT
    assert sorted(states(plan)) == [(nominal, "ready", None), (gap, "skipped", "dst_gap")]
    assert plan.next_due is not None
    assert plan.next_due.nominal_at == datetime(2026, 3, 9, 6, 30, tzinfo=UTC)  # 02:30 EDT on the 9th


def test_catch_up_under_forbid_runs_one_missed_occurrence_at_a_time() -> None:
    """Catch-up runs released together must not overlap: under forbid only the oldest runs,
    the next missed occurrence becomes the due row and its own dispatch applies the overlap rule."""
    c = claim(nominal=at(0), kind="cron", cron="* * * * *", concurrency="forbid", misfire="catch_up")
    plan = planning.plan_claim(c, at(2.5), lambda _t: at(2.5))
    assert states(plan) == [(at(0), "ready", None)]
    assert plan.next_due is not None and plan.next_due.nominal_at == at(1)
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "active", at(1), plan.next_due.next_run_at)
    # That next occurrence, dispatched while the first still runs, is recorded as an overlap skip.
    again = planning.plan_claim(
        replace(c, nominal_at=at(1), next_run_at=plan.next_due.next_run_at, overlapping=True), at(6), lambda _t: at(6)
    )
    assert next(s for s in states(again) if s[2] == "overlap")[0] == at(1)
    assert all(s[1] != "ready" for s in states(again))


def test_a_dry_run_job_records_its_occurrences_and_delivers_nothing() -> None:
    plan = planning.plan_claim(replace(claim(kind="cron", cron="* * * * *"), dry_run=True), at(0.1), no_slot)
    assert states(plan) == [(T0, "skipped", "dry_run")]
    assert plan.next_due is not None and plan.next_due.nominal_at == at(1)


def test_end_at_stops_the_schedule_after_its_last_occurrence() -> None:
    c = replace(claim(kind="cron", cron="* * * * *"), end_at=at(0.5))
    plan = planning.plan_claim(c, at(0.1), no_slot)
    assert states(plan) == [(T0, "ready", None)]
    assert plan.next_due is None and plan.advance == planning.dispatch_store.JobAdvance(JOB, "completed", None, None)
    # An occurrence already past a lowered endAt does not run at all.
    late = planning.plan_claim(replace(c, nominal_at=at(1), next_run_at=at(1)), at(1.1), no_slot)
    assert late.executions == [] and late.advance == planning.dispatch_store.JobAdvance(JOB, "completed", None, None)


def every_claim(nominal: datetime, every_s: int = 900, **kw) -> Claim:
    return replace(
        claim(nominal=nominal, **kw), schedule_kind="every", cron_resolved=None, tz=None, jitter_s=0, every_s=every_s
    )


def test_an_interval_step_runs_and_moves_the_due_row_one_interval_on() -> None:
    plan = planning.plan_claim(every_claim(T0), at(0.1), no_slot)
    assert states(plan) == [(T0, "ready", None)]
    assert plan.next_due is not None and plan.next_due.nominal_at == at(15)
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "active", at(15), at(15))


def test_an_interval_misfire_follows_the_policy_and_stays_on_its_grid() -> None:
    plan = planning.plan_claim(every_claim(T0, misfire="run_once"), at(50), no_slot)
    assert states(plan) == [
        (at(0), "skipped", "misfire"),
        (at(15), "skipped", "misfire"),
        (at(30), "skipped", "misfire"),
        (at(45), "ready", None),
    ]
    assert plan.next_due is not None and plan.next_due.nominal_at == at(60)
    skip = planning.plan_claim(every_claim(T0, misfire="skip"), at(50), no_slot)
    assert all(s[1] == "skipped" for s in states(skip)) and len(skip.executions) == 4


def zoned_claim(nominal: datetime, anchor: datetime, **kw) -> Claim:
    return replace(
        every_claim(nominal, every_s=86400, **kw),
        tz="Europe/London",
        dst_gap=kw.get("dst_gap", "shift"),
        dst_repeat="once",
        anchor_at=anchor,
    )


def test_a_zoned_day_moves_the_due_row_to_the_same_wall_time_across_dst() -> None:
    # 09:00 GMT on 28 March 2026; the next day is BST, so 09:00 local is 08:00 UTC (not 24 h later).
    day = datetime(2026, 3, 28, 9, 0, tzinfo=UTC)
    plan = planning.plan_claim(zoned_claim(day, anchor=day - timedelta(days=3)), day, no_slot)
    assert states(plan) == [(day, "ready", None)]
    nxt = datetime(2026, 3, 29, 8, 0, tzinfo=UTC)
    assert plan.next_due is not None and plan.next_due.nominal_at == nxt
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "active", nxt, nxt)


def test_a_zoned_day_whose_wall_time_falls_in_the_gap_is_recorded_as_skipped_with_gap_skip() -> None:
    day = datetime(2026, 3, 28, 1, 30, tzinfo=UTC)  # 01:30 GMT; on the 29th 01:30 does not exist
    plan = planning.plan_claim(replace(zoned_claim(day, anchor=day), dst_gap="skip"), day, no_slot)
    gap = datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
    assert sorted(states(plan)) == [(day, "ready", None), (gap, "skipped", "dst_gap")]
    assert plan.next_due is not None and plan.next_due.nominal_at == datetime(2026, 3, 30, 0, 30, tzinfo=UTC)


def test_a_zoned_day_misfire_lists_the_missed_days_on_the_wall_clock_grid() -> None:
    day = datetime(2026, 3, 27, 9, 0, tzinfo=UTC)
    now = datetime(2026, 3, 30, 9, 30, tzinfo=UTC)
    plan = planning.plan_claim(zoned_claim(day, anchor=day, misfire="run_once"), now, no_slot)
    assert states(plan) == [
        (day, "skipped", "misfire"),
        (datetime(2026, 3, 28, 9, 0, tzinfo=UTC), "skipped", "misfire"),
        (datetime(2026, 3, 29, 8, 0, tzinfo=UTC), "skipped", "misfire"),
        (datetime(2026, 3, 30, 8, 0, tzinfo=UTC), "ready", None),
    ]
    assert plan.next_due is not None and plan.next_due.nominal_at == datetime(2026, 3, 31, 8, 0, tzinfo=UTC)


def test_buffer_one_buffers_the_first_occurrence_due_while_the_previous_one_runs() -> None:
    plan = planning.plan_claim(
        claim(kind="cron", cron="* * * * *", concurrency="buffer_one", overlapping=True), at(0), no_slot
    )
    assert plan.executions == []  # nothing runs now, nothing is recorded: it waits on the job row
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "active", at(1), at(1), buffered_at=T0)
    assert plan.next_due is not None and plan.next_due.nominal_at == at(1)  # the chain goes on


def test_buffer_one_skips_an_occurrence_when_one_already_waits() -> None:
    c = replace(claim(kind="cron", cron="* * * * *", concurrency="buffer_one", overlapping=True), buffered_at=at(-1))
    plan = planning.plan_claim(c, at(0), no_slot)
    assert states(plan) == [(T0, "skipped", "overlap")]
    assert "buffer_one" in (plan.executions[0].note or "")
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "active", at(1), at(1))
    # One waiting with the previous execution already settled: it starts first (app.scheduler.buffered), so
    # this occurrence is skipped too rather than overtaking it.
    settled = planning.plan_claim(replace(c, overlapping=False), at(0), no_slot)
    assert states(settled) == [(T0, "skipped", "overlap")]


def test_buffer_one_runs_at_once_when_nothing_runs_and_is_held_until_due() -> None:
    c = claim(kind="cron", cron="* * * * *", concurrency="buffer_one")
    assert states(planning.plan_claim(c, at(0), no_slot)) == [(T0, "ready", None)]
    assert planning.plan_claim(c, at(-0.05), no_slot).held  # dispatched ahead: decided at the due time


def test_the_dispatch_chain_of_a_zoned_day_is_the_grid_preview_and_backfill_walk() -> None:
    """A year of due rows, each dispatched on time, lands on the instants EverySchedule lists (what the
    preview and a backfill read), DST changes and gap-skipped days included."""
    anchor = datetime(2026, 1, 2, 1, 30, tzinfo=UTC)  # 01:30 London: skipped on the spring-forward day
    c = replace(zoned_claim(anchor, anchor=anchor), dst_gap="skip")
    grid = jobs.stored_every(86400, anchor, 0, "Europe/London", "skip", "once")
    expected = [(o.nominal_utc, o.skipped) for o in itertools.islice(grid.occurrences_after(anchor), 365)]
    seen: list[tuple[datetime, bool]] = []
    while len(seen) < len(expected):
        plan = planning.plan_claim(c, c.next_run_at, no_slot)
        seen.extend((e.scheduled_for, e.state == "skipped") for e in plan.executions if e.scheduled_for != c.nominal_at)
        assert plan.next_due is not None
        seen.append((plan.next_due.nominal_at, False))
        c = replace(c, nominal_at=plan.next_due.nominal_at, next_run_at=plan.next_due.next_run_at)
    assert sorted(seen)[: len(expected)] == expected


def test_an_end_moved_before_the_due_occurrence_keeps_a_job_with_one_waiting_active() -> None:
    """endAt moved before the claimed occurrence ends the schedule; a buffer_one occurrence still waiting will
    run, so the job stays active (nothing further due) and its start completes it."""
    ended = replace(claim(kind="cron", cron="* * * * *", concurrency="buffer_one"), end_at=at(-1))
    plan = planning.plan_claim(ended, T0, no_slot)
    assert plan.advance == planning.dispatch_store.JobAdvance(JOB, "completed", None, None)
    waiting = planning.plan_claim(replace(ended, buffered_at=at(-2)), T0, no_slot)
    assert waiting.advance == planning.dispatch_store.JobAdvance(JOB, "active", None, None)
    assert waiting.executions == [] and waiting.next_due is None
