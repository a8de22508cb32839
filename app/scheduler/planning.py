"""Dispatch planning: what one claimed due row turns into. Pure: no I/O, no clock, no asyncio.

The dispatcher claims due rows (store.dispatch.claim) and hands each :class:`app.store.dispatch.Claim` to
:func:`plan_claim` with the time it plans at and a ``catch_up_slot`` that spreads catch-up
misfires of a tenant over time; the :class:`Plan` it returns lists the executions to insert
(ready, or skipped with a reason), the job's next due row and state, and for a replace-overlap
job the execution to cancel. The rules, in the order they apply:

* A job no longer active (paused, cancelled, completed, deleted): nothing runs; its due row is
  gone with the claim.
* Claimed before its due time (dispatch ahead) with concurrency forbid, replace or buffer_one: ``held``, the
  due row goes back unchanged, because overlap is decided at the due time.
* A one-off runs once and completes the job. A cron job runs its occurrence, records the DST-gap
  skips up to the next occurrence that runs, and moves its due row there (completed when none).
* Later occurrences already due too (Kairos was down): the misfire policy picks which run
  (run_once, catch_up, skip, capped at :data:`MISFIRE_CAP`); the others are recorded as skipped.
* An unfinished previous execution: forbid records the runs as skipped, replace cancels it, buffer_one
  keeps the run waiting on the job row (app.scheduler.buffered starts it once that execution settles)
  unless one waits already, and then records it as skipped; a schedule that ends with one waiting stays
  active until that one starts.

Cron evaluation is cached: jobs sharing an expression, zone and DST policy share one evaluation
per nominal instant, and each job's jitter offset is added on top (herds are exactly that case).
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from uuid import UUID

from app.domain import jobs
from app.domain import schedule as schedule_rules
from app.domain.shards import due_minute, shard_of
from app.domain.states import ExecutionState, JobState
from app.store import dispatch as dispatch_store

# Kubernetes' bound: a job never catches up more than this many missed occurrences.
MISFIRE_CAP = 100
# Gap-skipped occurrences recorded ahead in one chain step (a schedule that only ever falls in
# DST gaps would otherwise loop; real schedules have at most a couple in a row).
MAX_SKIPPED_AHEAD = 16


@functools.lru_cache(maxsize=65_536)
def _chain_step(
    expr: str,
    tz: str,
    gap: str,
    repeat: str,
    after: datetime,
) -> tuple[tuple[schedule_rules.Occurrence, ...], schedule_rules.Occurrence | None]:
    """Gap-skipped occurrences, then the first one that runs, strictly after ``after`` (no jitter).

    ``expr`` is the resolved expression (no H tokens), so the job key plays no part here.
    """
    schedule = jobs.stored_schedule(expr, tz, 0, gap, repeat)
    skipped: list[schedule_rules.Occurrence] = []
    for occ in schedule_rules.occurrences_after(schedule, after, "resolved"):
        if not occ.skipped:
            return tuple(skipped), occ
        skipped.append(occ)
        if len(skipped) >= MAX_SKIPPED_AHEAD:
            break
    return tuple(skipped), None


@functools.lru_cache(maxsize=262_144)
def _jitter(job_id: UUID, window_s: int) -> timedelta:
    return timedelta(seconds=schedule_rules.jitter_offset_s(str(job_id), window_s))


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Plan:
    """Everything one claimed due row turns into."""

    executions: list[dispatch_store.NewExecution] = field(default_factory=list)
    next_due: dispatch_store.NextDue | None = None
    advance: dispatch_store.JobAdvance | None = None
    replacement: dispatch_store.Replacement | None = None
    lag_s: float | None = None
    # Claimed before it was due, but its overlap policy must be applied at the due time: the due
    # row goes back unchanged (next_due) and the entry waits in the heap.
    held: bool = False


def plan_claim(c: dispatch_store.Claim, now: datetime, catch_up_slot: Callable[[UUID], datetime]) -> Plan:
    """Turn one claimed due row into executions, the next due row and the job's new state."""
    plan = Plan()
    if c.job_state != JobState.ACTIVE:
        return plan  # paused/cancelled/completed (or deleted): the orphan row is gone, nothing runs
    assert c.tenant_id is not None and c.nominal_at is not None and c.queue is not None
    assert c.max_attempts is not None
    tenant_id, queue, max_attempts = c.tenant_id, c.queue, c.max_attempts
    if c.next_run_at > now and c.concurrency != "allow":
        plan.held = True
        plan.next_due = dispatch_store.NextDue(
            c.shard_id, due_minute(c.next_run_at), c.next_run_at, c.job_id, tenant_id, c.nominal_at
        )
        return plan

    def execution(
        nominal: datetime,
        ready_at: datetime,
        state: ExecutionState = ExecutionState.READY,
        reason: str | None = None,
        note: str | None = None,
    ) -> dispatch_store.NewExecution:
        return dispatch_store.NewExecution(
            c.job_id, tenant_id, queue, nominal, max_attempts, state, ready_at, reason, note
        )

    if c.end_at is not None and c.nominal_at > c.end_at:
        # endAt moved before this occurrence (an update): the schedule is over; a buffer_one occurrence still
        # waiting keeps the job active until it starts (app.scheduler.buffered completes it then).
        ended = JobState.ACTIVE if c.buffered_at is not None else JobState.COMPLETED
        plan.advance = dispatch_store.JobAdvance(c.job_id, ended, None, None)
        return plan
    # (nominal, ready_at) of every occurrence that runs now, oldest first.
    runs: list[tuple[datetime, datetime]] = [(c.nominal_at, c.next_run_at)]
    if c.schedule_kind == "once":
        plan.advance = dispatch_store.JobAdvance(c.job_id, JobState.COMPLETED, None, None)
    else:
        jitter = _jitter(c.job_id, c.jitter_s or 0)
        gap_skipped: tuple[schedule_rules.Occurrence, ...] = ()
        if c.schedule_kind == "every":
            runs, misfire_records, following, gap_skipped = _every_step(c, now, catch_up_slot, jitter)
            plan.executions.extend(execution(*record) for record in misfire_records)
        else:
            assert c.cron_resolved and c.tz and c.dst_gap and c.dst_repeat
            gap_skipped, following = _chain_step(c.cron_resolved, c.tz, c.dst_gap, c.dst_repeat, c.nominal_at)
        if c.schedule_kind != "every" and following is not None and following.nominal_utc <= now:
            # Misfire: later occurrences are already due too; Kairos was down (or far behind).
            runs, misfire_records, following, gap_skipped = _plan_misfire(c, now, catch_up_slot)
            plan.executions.extend(execution(*record) for record in misfire_records)
        if c.end_at is not None:
            runs = [r for r in runs if r[0] <= c.end_at]
            gap_skipped = tuple(o for o in gap_skipped if o.nominal_utc <= c.end_at)
            if following is not None and following.nominal_utc > c.end_at:
                following = None  # the schedule's last occurrence has run (or runs now)
        for occ in gap_skipped:
            plan.executions.append(
                execution(occ.nominal_utc, occ.nominal_utc + jitter, ExecutionState.SKIPPED, "dst_gap", occ.dst_note)
            )
        if c.concurrency in ("forbid", "buffer_one") and len(runs) > 1:
            # Catch-up under forbid (or buffer_one) runs one missed occurrence at a time: the next one becomes the
            # due row, and its own dispatch applies the overlap rule then (runs, or is recorded as
            # skipped because this one is still unfinished); the misfire maths resumes from it.
            (nominal, ready_at), runs = runs[1], runs[:1]
            plan.next_due = dispatch_store.NextDue(
                shard_of(c.job_id), due_minute(ready_at), ready_at, c.job_id, c.tenant_id, nominal
            )
            plan.advance = dispatch_store.JobAdvance(c.job_id, JobState.ACTIVE, nominal, ready_at)
            following = None
        elif following is None:
            plan.advance = dispatch_store.JobAdvance(c.job_id, JobState.COMPLETED, None, None)
        else:
            run_at = following.nominal_utc + jitter
            plan.next_due = dispatch_store.NextDue(
                shard_of(c.job_id), due_minute(run_at), run_at, c.job_id, c.tenant_id, following.nominal_utc
            )
            plan.advance = dispatch_store.JobAdvance(c.job_id, JobState.ACTIVE, following.nominal_utc, run_at)
    if not runs:
        return plan
    if c.overlapping and c.concurrency == "forbid":
        note = "the previous execution was still unfinished"
        plan.executions.extend(execution(n, r, ExecutionState.SKIPPED, "overlap", note) for n, r in runs)
        return plan
    if c.dry_run:
        # Recorded where it would have run, never delivered: compare with the old cron, then flip.
        note = "dry run: recorded, not delivered"
        plan.executions.extend(execution(n, r, ExecutionState.SKIPPED, "dry_run", note) for n, r in runs)
        return plan
    if c.concurrency == "buffer_one" and (c.overlapping or c.buffered_at is not None):
        # Temporal's buffer_one: one occurrence waits on the job row and starts once the previous execution
        # settles (app.scheduler.buffered); one already waiting keeps its place (it starts first, even when
        # the previous one has just settled), and this one is recorded as skipped.
        if c.buffered_at is None and plan.advance is not None:
            # A schedule that ends here (endAt passed, a one-off) still has this one to run: the job stays active,
            # with nothing further due, and the start completes it.
            plan.advance = replace(plan.advance, state=JobState.ACTIVE, buffered_at=runs[0][0])
            return plan
        note = "an occurrence already waits for the previous execution (buffer_one keeps one)"
        plan.executions.extend(execution(n, r, ExecutionState.SKIPPED, "overlap", note) for n, r in runs)
        return plan
    if c.overlapping and c.concurrency == "replace":
        plan.replacement = dispatch_store.Replacement(c.job_id, runs[0][0], f"replaced by {_iso(runs[-1][0])}")
    plan.executions.extend(execution(n, r) for n, r in runs)
    if len(runs) == 1 and runs[0][0] == c.nominal_at:
        plan.lag_s = max(0.0, (now - c.next_run_at).total_seconds())
    return plan


EveryStep = tuple[
    list[tuple[datetime, datetime]],
    list[tuple[datetime, datetime, ExecutionState, str, str]],
    schedule_rules.Occurrence | None,
    tuple[schedule_rules.Occurrence, ...],
]


def _every_step(
    c: dispatch_store.Claim,
    now: datetime,
    catch_up_slot: Callable[[UUID], datetime],
    jitter: timedelta,
) -> EveryStep:
    """An interval schedule's step: runs, skipped records, the next occurrence and the DST-gap skips before
    it, with the same misfire rules as cron (occurrences are nominal + k * every in UTC, or with a zone
    whole days on its wall clock: _zoned_every_step)."""
    assert c.every_s and c.nominal_at and c.misfire and c.tenant_id
    if c.tz is not None:
        return _zoned_every_step(c, now, catch_up_slot, jitter)
    step = timedelta(seconds=c.every_s)

    def occurrence(nominal: datetime) -> schedule_rules.Occurrence:
        return schedule_rules.Occurrence(nominal, nominal + jitter, nominal, False, None, None)

    missed_total = int((now - c.nominal_at) / step) if now >= c.nominal_at + step else 0
    following = occurrence(c.nominal_at + step * (missed_total + 1))
    if not missed_total:
        return [(c.nominal_at, c.next_run_at)], [], following, ()
    newest = [
        occurrence(c.nominal_at + step * k) for k in range(max(1, missed_total - MISFIRE_CAP + 1), missed_total + 1)
    ]
    runs, records = _every_misfire(c, newest, missed_total, catch_up_slot)
    return runs, records, following, ()


def _zoned_every_step(
    c: dispatch_store.Claim,
    now: datetime,
    catch_up_slot: Callable[[UUID], datetime],
    jitter: timedelta,
) -> EveryStep:
    """_every_step of whole days in a zone: the grid is walked from this occurrence (a day at a time, so
    an outage of a year costs 365 placements); gap-skipped days are recorded as such, not as misfires."""
    assert c.every_s and c.nominal_at and c.anchor_at and c.tz
    grid = jobs.EverySchedule(
        c.every_s, c.anchor_at, c.jitter_s or 0, None, c.tz, jobs.dst_policy(c.dst_gap, c.dst_repeat)
    )
    newest: collections.deque[schedule_rules.Occurrence] = collections.deque(maxlen=MISFIRE_CAP)
    gaps: collections.deque[schedule_rules.Occurrence] = collections.deque(maxlen=MISFIRE_CAP)
    missed_total = 0
    following = None
    for placed in grid.occurrences_after(c.nominal_at):
        o = replace(placed, run_at=placed.nominal_utc + jitter)
        if o.skipped:
            gaps.append(o)
            if o.nominal_utc > now and len(gaps) >= MAX_SKIPPED_AHEAD:
                break
        elif o.nominal_utc <= now:
            newest.append(o)
            missed_total += 1
        else:
            following = o
            break
    if not missed_total:
        return [(c.nominal_at, c.next_run_at)], [], following, tuple(gaps)
    runs, records = _every_misfire(c, list(newest), missed_total, catch_up_slot)
    return runs, records, following, tuple(gaps)


def _every_misfire(
    c: dispatch_store.Claim,
    newest: list[schedule_rules.Occurrence],
    missed_total: int,
    catch_up_slot: Callable[[UUID], datetime],
) -> tuple[list[tuple[datetime, datetime]], list[tuple[datetime, datetime, ExecutionState, str, str]]]:
    """Which of this occurrence and the ``newest`` missed ones (``missed_total`` in all) run, by the misfire
    policy; the others as skipped records."""
    assert c.nominal_at and c.misfire and c.tenant_id
    misfire = jobs.misfire_policy(c.misfire)
    this = schedule_rules.Occurrence(c.nominal_at, c.next_run_at, c.nominal_at, False, None, None)
    listed = [this, *newest][-MISFIRE_CAP:]
    decision = schedule_rules.plan_misfire(misfire, listed, missed_total + 1, cap=MISFIRE_CAP)
    run_ids = {occ.nominal_utc for occ in decision.run}
    note = f"missed while no scheduler ran; misfire policy {misfire}"
    records = [
        (o.nominal_utc, o.run_at, ExecutionState.SKIPPED, "misfire", note)
        for o in listed
        if o.nominal_utc not in run_ids
    ]
    runs = [
        (o.nominal_utc, max(o.run_at, catch_up_slot(c.tenant_id)) if misfire == "catch_up" else o.run_at)
        for o in decision.run
    ]
    return runs, records


def _plan_misfire(
    c: dispatch_store.Claim,
    now: datetime,
    catch_up_slot: Callable[[UUID], datetime],
) -> tuple[
    list[tuple[datetime, datetime]],
    list[tuple[datetime, datetime, ExecutionState, str, str]],
    schedule_rules.Occurrence | None,
    tuple[schedule_rules.Occurrence, ...],
]:
    """Runs, skipped records, the next occurrence after now and gap-skips before it."""
    assert c.cron_resolved and c.tz and c.nominal_at and c.misfire and c.tenant_id and c.dst_gap and c.dst_repeat
    key = str(c.job_id)
    misfire = jobs.misfire_policy(c.misfire)
    schedule = jobs.stored_schedule(c.cron_resolved, c.tz, c.jitter_s, c.dst_gap, c.dst_repeat)
    missed, total = schedule_rules.missed_occurrences(schedule, c.nominal_at, now, key, cap=MISFIRE_CAP)
    this = schedule_rules.Occurrence(c.nominal_at, c.next_run_at, c.nominal_at, False, None, None)
    listed = [this, *missed][-MISFIRE_CAP:]
    decision = schedule_rules.plan_misfire(misfire, listed, total + 1, cap=MISFIRE_CAP)
    run_ids = {occ.nominal_utc for occ in decision.run}
    unlisted = total + 1 - len(listed)
    records: list[tuple[datetime, datetime, ExecutionState, str, str]] = []
    for i, occ in enumerate(o for o in listed if o.nominal_utc not in run_ids):
        note = f"missed while no scheduler ran; misfire policy {misfire}"
        if i == 0 and unlisted:
            note += f" ({unlisted} older missed occurrences since {_iso(c.nominal_at)} are not listed)"
        records.append((occ.nominal_utc, occ.run_at, ExecutionState.SKIPPED, "misfire", note))
    runs: list[tuple[datetime, datetime]] = []
    for occ in decision.run:
        ready_at = occ.run_at
        if misfire == "catch_up":
            ready_at = max(ready_at, catch_up_slot(c.tenant_id))
        runs.append((occ.nominal_utc, ready_at))
    after = listed[-1].nominal_utc if listed else now
    gap_skipped, following = _chain_step(c.cron_resolved, c.tz, c.dst_gap, c.dst_repeat, max(after, now))
    return runs, records, following, gap_skipped
