"""What GET /v1/schedules/preview does: the fire times of a schedule, placed as the scheduler places them.

An interval (``every``, anchored at ``startAt`` or, as a new job would be, one interval from now),
or an every job's own grid (``jobId``), lists the grid's instants after ``from``: elapsed time, or with
``tz`` whole days at the anchor's wall-clock time by the cron DST rules (``gap``, ``repeat``).
Otherwise, a preview evaluates either an expression given in the query
(``cron`` and ``tz``, with the DST policy and jitter window a job would have) or an existing cron
job of the caller's tenant
(``jobId``): its stored resolved expression, zone, DST policy, jitter window and bounds, keyed by
its id, so H tokens and the jitter offset are the job's own. Query values given beside ``jobId``
replace the job's, to preview a change before making it. Without ``jobId`` there is no job id to
key H tokens and jitter by: both are drawn for a placeholder key, so they show the shape of the
spread, not the slot a job submitted later will get.

Every problem names the query parameter it is about (``cron``, ``tz``, ``gap``, ...), not the body
field the same rule has on POST /v1/jobs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from uuid import UUID

from app import errors
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.store import Database
from app.store import jobs as jobs_store

PREVIEW_KEY = "preview"
PREVIEW_MAX = 100
_EPSILON = timedelta(microseconds=1)

# The query parameter each schedule field is given in.
_PARAMETER_OF = {
    "schedule.cron": "cron",
    "schedule.tz": "tz",
    "schedule.jitterSeconds": "jitterSeconds",
    "schedule.dst.gap": "gap",
    "schedule.dst.repeat": "repeat",
    "schedule.every": "every",
}


@dataclass(frozen=True)
class PreviewQuery:
    """The query of GET /v1/schedules/preview; None is "not given"."""

    cron: str | None = None
    tz: str | None = None
    count: int = 10
    from_: str | None = None
    gap: str | None = None
    repeat: str | None = None
    jitter_s: int | None = None
    job_id: str | None = None
    every: str | None = None
    start_at: str | None = None  # the anchor of an every schedule


@dataclass(frozen=True)
class Preview:
    job: jobs_store.Job | None  # the job previewed, when jobId was given
    expr: str  # as given (or stored), H tokens and all; an every schedule's interval
    schedule: schedule_rules.CronSchedule | job_rules.EverySchedule  # resolved: what the scheduler evaluates
    jitter_offset_s: int  # the key's slot in the jitter window
    occurrences: list[schedule_rules.Occurrence]


@dataclass(frozen=True)
class PreviewLimits:
    """The server's rules a previewed expression must meet, as a submitted one would."""

    horizon_days: int = 3660  # KAIROS_MAX_SCHEDULE_HORIZON_DAYS: how far ahead ``from`` may lie
    min_interval_s: int = 0  # KAIROS_MIN_FIRE_INTERVAL_S


async def preview(
    db: Database, tenant_id: UUID, q: PreviewQuery, now: datetime, limits: PreviewLimits = PreviewLimits()
) -> Preview:
    if not 1 <= q.count <= PREVIEW_MAX:
        raise errors.InvalidParameter("count", f"must be between 1 and {PREVIEW_MAX}")
    try:
        start = now
        if q.from_ is not None:
            start = job_rules.within_horizon(job_rules.parse_instant(q.from_, "from"), now, limits.horizon_days, "from")
        job = await _job(db, tenant_id, q.job_id) if q.job_id is not None else None
        if q.every is not None or (job is not None and job.schedule_kind == "every" and q.cron is None):
            return _evaluate_every(q, job, start, now, limits)
        if job is not None and job.schedule_kind != "cron":
            raise errors.InvalidParameter(
                "jobId", f"is a {job.schedule_kind} job; only recurring jobs have fire times to preview"
            )
        if q.start_at is not None:
            raise errors.InvalidParameter("startAt", "anchors an every schedule; a cron preview starts at from")
        return _evaluate(q, job, start, limits)
    except errors.InvalidParameter:
        raise
    except errors.InvalidInput as exc:
        raise errors.InvalidParameter(_PARAMETER_OF.get(exc.field, exc.field), exc.detail) from None


async def _job(db: Database, tenant_id: UUID, job_id: str) -> jobs_store.Job:
    try:
        ident = UUID(job_id)
    except ValueError:
        raise errors.InvalidParameter("jobId", "is not a UUID") from None
    job = await db.transaction(lambda tx: tx.jobs.get(tenant_id, ident))
    if job is None:
        raise errors.JobNotFound()
    return job


def _evaluate_every(
    q: PreviewQuery, job: jobs_store.Job | None, start: datetime, now: datetime, limits: PreviewLimits
) -> Preview:
    """The instants of an interval's grid strictly after ``start``, within the job's bounds."""
    if q.cron is not None:
        raise errors.InvalidParameter("every", "give cron (with tz) or every, not both")
    if job is not None and job.schedule_kind != "every" and q.every is None:
        raise errors.InvalidParameter("jobId", f"is a {job.schedule_kind} job, not an every job")
    every = q.every if q.every is not None else job_rules.format_every(job.every_s or 0) if job else ""
    jitter_s = q.jitter_s if q.jitter_s is not None else job.jitter_s if job is not None else 0
    if not 0 <= jitter_s <= job_rules.MAX_JITTER_S:
        raise errors.InvalidParameter("jitterSeconds", f"must be between 0 and {job_rules.MAX_JITTER_S}")
    # The zone and DST policy: the query's, else the job's (a zone given alone takes the default policy).
    tz = q.tz if q.tz is not None else job.tz if job is not None else None
    stored = job is not None and q.tz is None and job.tz is not None
    gap = q.gap if q.gap is not None else job.dst_gap if stored and job else None
    repeat = q.repeat if q.repeat is not None else job.dst_repeat if stored and job else None
    dst = job_rules.dst_policy(gap, repeat) if gap is not None or repeat is not None else None
    if q.start_at is not None:
        anchor: datetime | None = job_rules.within_horizon(
            job_rules.parse_instant(q.start_at, "startAt"), now, limits.horizon_days, "startAt"
        )
    elif job is not None and job.schedule_kind == "every" and job.anchor_at is not None:
        anchor = job.anchor_at
    else:
        anchor = None  # as a job submitted now
    if tz is None and dst is not None:
        raise errors.InvalidParameter("gap" if q.gap is not None else "repeat", "applies with a tz only")
    grid = job_rules.every_schedule(
        every, jitter_s, anchor, now, max(limits.min_interval_s, 1), tz=tz, dst=dst if tz is not None else None
    )
    key = str(job.job_id) if job is not None else PREVIEW_KEY
    offset = schedule_rules.jitter_offset_s(key, jitter_s)
    end_at = job.end_at if job is not None else None
    if job is not None and job.start_at is not None:
        start = max(start, job.start_at - _EPSILON)
    found: list[schedule_rules.Occurrence] = []
    for o in grid.occurrences_after(start):
        if len(found) == q.count or (end_at is not None and o.nominal_utc > end_at):
            break
        run_at = o.nominal_utc + timedelta(seconds=offset)
        found.append(replace(o, run_at=run_at, local=run_at.astimezone(o.local.tzinfo)))
    return Preview(job, every, grid, offset, found)


def _evaluate(q: PreviewQuery, job: jobs_store.Job | None, start: datetime, limits: PreviewLimits) -> Preview:
    if job is not None and (job.cron is None or job.cron_resolved is None or job.tz is None):
        raise errors.InvalidParameter(
            "jobId", f"is a {job.schedule_kind} job; only recurring jobs have fire times to preview"
        )
    if job is None:
        for name, value in (("cron", q.cron), ("tz", q.tz)):
            if value is None:
                raise errors.InvalidParameter(name, "is required unless jobId names a job to preview")
    key = str(job.job_id) if job is not None else PREVIEW_KEY
    expr = q.cron if q.cron is not None else job.cron if job is not None else None
    assert expr is not None
    if q.tz is not None:
        schedule_rules.validate_tz(q.tz)  # a new zone must be one a job may name; a stored one stays as it was
    tz = q.tz if q.tz is not None else job.tz if job is not None else None
    assert tz is not None
    resolved = (
        job_rules.validate_cron_interval(q.cron, key, limits.min_interval_s)
        if q.cron is not None
        else job.cron_resolved
        if job
        else None
    )
    assert resolved is not None
    jitter_s = q.jitter_s if q.jitter_s is not None else job.jitter_s if job is not None else 0
    if not 0 <= jitter_s <= job_rules.MAX_JITTER_S:
        raise errors.InvalidParameter("jitterSeconds", f"must be between 0 and {job_rules.MAX_JITTER_S}")
    schedule = job_rules.stored_schedule(
        resolved,
        tz,
        jitter_s,
        q.gap if q.gap is not None else job.dst_gap if job else None,
        q.repeat if q.repeat is not None else job.dst_repeat if job else None,
    )
    end_at = None
    if job is not None:
        # The job's bounds: nothing fires before startAt or after endAt.
        if job.start_at is not None:
            start = max(start, job.start_at - _EPSILON)
        end_at = job.end_at
    found = [
        o for o in schedule_rules.preview(schedule, start, q.count, key) if end_at is None or o.nominal_utc <= end_at
    ]
    return Preview(job, expr, schedule, schedule_rules.jitter_offset_s(key, jitter_s), found)
