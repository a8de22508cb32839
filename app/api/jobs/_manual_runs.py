"""Occurrences a tenant asks for outside the schedule: POST :run and POST :backfill."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from uuid import UUID

from app import errors
from app.api.jobs._spec import _EPSILON, utcnow
from app.api.jobs._stored import cron_of, every_of, locked
from app.config import Settings
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.domain.states import JobState
from app.observability import tracing
from app.store import Database, Store
from app.store import dispatch as dispatch_store
from app.store import jobs as jobs_store

RUN_OVERLAPS = ("allow", "forbid", "replace")


def _trace(job: jobs_store.Job, nominal: datetime, trigger: str) -> str | None:
    """The trace of an occurrence the tenant asked for (a dry run records, so it has none)."""
    if job.dry_run:
        return None
    return tracing.occurrence(
        job.traceparent,
        one_off=False,
        attributes={
            "kairos.job_id": str(job.job_id),
            "kairos.tenant_id": str(job.tenant_id),
            "kairos.scheduled_for": nominal.isoformat(),
            "kairos.trigger": trigger,
        },
    )


async def run_now(db: Database, tenant_id: UUID, job_id: UUID, overlap: str | None) -> tuple[jobs_store.Job, UUID]:
    """POST /v1/jobs/{jobId}:run: one occurrence now, outside the schedule (the schedule is unchanged)."""
    if overlap is not None and overlap not in RUN_OVERLAPS:
        raise errors.InvalidInput("overlap", f"must be one of {', '.join(RUN_OVERLAPS)}")

    async def work(tx: Store) -> tuple[jobs_store.Job, UUID]:
        job = await locked(tx, tenant_id, job_id)
        if job.state == JobState.CANCELLED:
            raise errors.InvalidStateTransition("a cancelled job cannot run")
        policy = overlap or job.concurrency
        counts = await tx.jobs.execution_counts(tenant_id, job_id)
        now = utcnow()
        if counts.pending and policy == "forbid":
            raise errors.InvalidStateTransition(
                "an execution of this job is still unfinished and its overlap policy is forbid; "
                'send {"overlap": "allow"} or "replace" to run anyway'
            )
        if counts.pending and policy == "replace":
            await tx.dispatch.cancel_replaced([dispatch_store.Replacement(job_id, now, "replaced by a manual run")])
        made = await tx.jobs.insert_executions(
            job, [now], [now], trigger="manual", dry_run=job.dry_run, traceparents=[_trace(job, now, "manual")]
        )
        if now not in made:
            raise errors.StoreConflict("an occurrence at this instant exists already; retry")
        return job, made[now]

    return await db.transaction(work)


MAX_BACKFILL = 1000


def _occurrences_from(job: jobs_store.Job, start: datetime) -> Iterator[schedule_rules.Occurrence]:
    """The job's schedule from ``start`` on (inclusive), cron or interval."""
    if job.schedule_kind != "every":
        yield from schedule_rules.occurrences_after(cron_of(job), start - _EPSILON, str(job.job_id))
        return
    yield from every_of(job).occurrences_after(start - _EPSILON)


def _no_occurrence_note(job: jobs_store.Job, start: datetime) -> str:
    """Why a backfill range held no occurrence of ``job``'s schedule."""
    if job.schedule_kind == "every" and job.anchor_at is not None and start < job.anchor_at:
        return (
            f"no occurrence in the range: an every schedule runs from its anchor, "
            f"{job.anchor_at.isoformat()} (its startAt, or one interval after its submit); "
            "backfill a range after it"
        )
    first = next(iter(_occurrences_from(job, start)), None)
    after = f"; the first after from is {first.nominal_utc.isoformat()}" if first is not None else ""
    return "no occurrence of the job's schedule falls in the range" + after


async def backfill(
    db: Database,
    settings: Settings,
    tenant_id: UUID,
    job_id: UUID,
    from_: str,
    to: str,
    overlap: str | None,
    *,
    limit: int = MAX_BACKFILL,
) -> tuple[int, int, datetime | None, str | None]:
    """POST /v1/jobs/{jobId}:backfill: the schedule's occurrences in [from, to), paced per tenant.

    Returns (created, already there, where to continue when the range held more than ``limit`` (at most
    MAX_BACKFILL: the tenant's manual-run quotas may admit fewer), why the range holds no occurrence when
    it holds none)."""
    start = job_rules.parse_instant(from_, "from")
    end = job_rules.parse_instant(to, "to")
    now = utcnow()
    if not start < end:
        raise errors.InvalidInput("to", "must be after from")
    if end > now:
        raise errors.InvalidInput("to", "a backfill covers the past: to must not be in the future")
    if overlap is not None and overlap not in ("allow", "forbid"):
        raise errors.InvalidInput("overlap", "must be allow or forbid")

    async def work(tx: Store) -> tuple[int, int, datetime | None, str | None]:
        job = await locked(tx, tenant_id, job_id)
        if job.schedule_kind == "once":
            raise errors.InvalidInput("jobId", "only a recurring job has occurrences to backfill")
        if job.state == JobState.CANCELLED:
            raise errors.InvalidStateTransition("a cancelled job cannot be backfilled")
        nominals: list[datetime] = []
        resume_at = None
        for occ in _occurrences_from(job, start):
            if occ.nominal_utc >= end:
                break
            if len(nominals) == min(limit, MAX_BACKFILL):
                resume_at = occ.nominal_utc
                break
            if not occ.skipped:
                nominals.append(occ.nominal_utc)
        # Paced like catch-up: the tenant's backfill becomes ready at catch_up_per_tenant_per_s; under
        # forbid one occurrence per timeoutSeconds, so no first attempt overlaps the previous one.
        step = (
            job.timeout_s
            if (overlap or job.concurrency) == "forbid"
            else 1.0 / max(settings.catch_up_per_tenant_per_s, 1e-3)
        )
        ready = [now + timedelta(seconds=i * step) for i in range(len(nominals))]
        made = await tx.jobs.insert_executions(
            job,
            nominals,
            ready,
            trigger="backfill",
            dry_run=job.dry_run,
            traceparents=[_trace(job, n, "backfill") for n in nominals],
        )
        note = None if nominals or resume_at is not None else _no_occurrence_note(job, start)
        return len(made), len(nominals) - len(made), resume_at, note

    return await db.transaction(work)
