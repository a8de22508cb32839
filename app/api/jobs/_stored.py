"""A stored job read back: its schedule as the domain evaluates it, and the row locked for a change."""

from __future__ import annotations

from uuid import UUID

from app import errors
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.store import Store
from app.store import jobs as jobs_store


def every_of(job: jobs_store.Job) -> job_rules.EverySchedule:
    assert job.every_s is not None and job.anchor_at is not None
    return job_rules.stored_every(job.every_s, job.anchor_at, job.jitter_s, job.tz, job.dst_gap, job.dst_repeat)


def cron_of(job: jobs_store.Job) -> schedule_rules.CronSchedule:
    assert job.cron_resolved is not None and job.tz is not None
    return job_rules.stored_schedule(job.cron_resolved, job.tz, job.jitter_s, job.dst_gap, job.dst_repeat)


async def locked(tx: Store, tenant_id: UUID, job_id: UUID) -> jobs_store.Job:
    job = await tx.jobs.get(tenant_id, job_id, for_update=True)
    if job is None:
        raise errors.JobNotFound()
    return job
