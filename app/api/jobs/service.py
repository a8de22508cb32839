"""What the job endpoints do, one transaction each, scoped to one tenant.

Split by topic: building a spec from a body (``_spec``), reading a stored job (``_stored``), and the
occurrences asked for outside the schedule (``_manual_runs``); their public names are re-exported here.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import msgspec

from app import errors
from app.api import bodies, problems
from app.api.jobs import large_payloads, schemas, views
from app.api.jobs._manual_runs import MAX_BACKFILL, RUN_OVERLAPS, backfill, run_now
from app.api.jobs._spec import _EPSILON, build_spec, submission, utcnow
from app.api.jobs._stored import cron_of, every_of, locked
from app.api.jobs.submit import Created, Submission, SubmitWriter, new_job_row, not_granted
from app.api.pagination import decode_cursor, page_limit, split_page
from app.config import Settings
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.domain.states import REPORTED_JOB_STATES, JobState
from app.observability import tracing
from app.store import Database, Store
from app.store import jobs as jobs_store
from app.store.attempts import Attempt
from app.store.payloads import PayloadStore

__all__ = ["MAX_BACKFILL", "RUN_OVERLAPS", "backfill", "build_spec", "run_now", "submission", "utcnow"]

log = logging.getLogger(__name__)
# GET /v1/jobs/{id} counts the job's newest executions by state, not its whole retained history (43,000
# rows for a job that fires every minute): a read bounded whatever the job's history.
COUNTED_EXECUTIONS = 1000


class JobSubmitter:
    """The one implementation of a submit: POST /v1/jobs
    (app.api.jobs.create_route) and each item of POST /v1/jobs:batch. Validates, keeps a large payload
    in the object store, and hands the jobs to the process's group-committing writer."""

    def __init__(self, settings: Settings, writer: SubmitWriter, payload_store: PayloadStore) -> None:
        self.settings = settings
        self.writer = writer
        self.payload_store = payload_store

    async def create(
        self, tenant_id: UUID, body: schemas.JobIn, raw: bytes, idempotency_key: str | None, traceparent: str | None
    ) -> schemas.JobCreated:
        """One job; raises the KairosError that refuses it."""
        fingerprint = job_rules.request_fingerprint(raw) if idempotency_key else None
        with tracing.span(
            "kairos.submit", parent=traceparent, attributes={"kairos.tenant_id": str(tenant_id)}
        ) as context:
            sub = submission(body, self.settings, tenant_id, idempotency_key, fingerprint, utcnow(), context)
            [outcome] = await self.writer.submit(await large_payloads.keep_large(self.payload_store, [sub]))
        if isinstance(outcome, errors.KairosError):
            raise outcome
        return schemas.JobCreated(
            job_id=str(outcome.job_id), next_run_at=outcome.next_run_at, warnings=list(outcome.warnings) or None
        )

    async def create_batch(self, tenant_id: UUID, batch: schemas.BatchIn, traceparent: str | None) -> schemas.BatchOut:
        """Each item validated on its own; the valid ones stored together. Results in request order."""
        with tracing.span(
            "kairos.submit_batch",
            parent=traceparent,
            attributes={"kairos.tenant_id": str(tenant_id), "kairos.jobs": len(batch.jobs)},
        ) as context:
            return await self._create_batch(tenant_id, batch, utcnow(), context)

    async def _create_batch(
        self, tenant_id: UUID, batch: schemas.BatchIn, now: datetime, traceparent: str | None
    ) -> schemas.BatchOut:
        results: list[schemas.BatchItemOut | None] = [None] * len(batch.jobs)
        subs: list[Submission] = []
        where: list[int] = []
        for index, raw_item in enumerate(batch.jobs):
            try:
                item, fingerprint = _decode_item(raw_item)
                subs.append(
                    submission(item, self.settings, tenant_id, item.idempotency_key, fingerprint, now, traceparent)
                )
                where.append(index)
            except errors.InvalidInput as exc:
                results[index] = _item_error(exc, index)
        outcomes = await self.writer.submit(await large_payloads.keep_large(self.payload_store, subs))
        for index, outcome in zip(where, outcomes, strict=True):
            results[index] = (
                schemas.BatchItemOut(
                    job_id=str(outcome.job_id), next_run_at=outcome.next_run_at, warnings=list(outcome.warnings) or None
                )
                if isinstance(outcome, Created)
                else _item_error(outcome, index)
            )
        return schemas.BatchOut(results=[r for r in results if r is not None])


def _item_error(exc: errors.KairosError, index: int) -> schemas.BatchItemOut:
    return schemas.BatchItemOut(
        error=problems.error_body(exc, f"/v1/jobs:batch#/jobs/{index}", within=f"/jobs/{index}"), index=index
    )


def _decode_item(raw: msgspec.Raw) -> tuple[schemas.BatchItemIn, str | None]:
    """The item and, when it carries an idempotencyKey, the fingerprint of the rest of it."""
    item: schemas.BatchItemIn = bodies.decode(raw, schemas.BatchItemIn)  # a problem's field points into the item
    if item.idempotency_key is None:
        return item, None
    decoded: dict[str, Any] = msgspec.json.decode(raw)
    decoded.pop("idempotencyKey")
    return item, job_rules.value_fingerprint(decoded)


# -- reading -------------------------------------------------------------------------------------------


async def get_job(db: Database, tenant_id: UUID, job_id: UUID) -> jobs_store.Job:
    job = await db.transaction(lambda tx: tx.jobs.get(tenant_id, job_id))
    if job is None:
        raise errors.JobNotFound()
    return job


async def get_job_with_counts(
    db: Database,
    tenant_id: UUID,
    job_id: UUID,
) -> tuple[jobs_store.Job, jobs_store.ExecutionCounts]:
    async def work(tx: Store) -> tuple[jobs_store.Job, jobs_store.ExecutionCounts]:
        job = await tx.jobs.get(tenant_id, job_id)
        if job is None:
            raise errors.JobNotFound()
        return job, await tx.jobs.execution_counts(tenant_id, job_id, newest=COUNTED_EXECUTIONS)

    return await db.transaction(work, isolation="REPEATABLE READ")


async def list_jobs(
    db: Database,
    tenant_id: UUID,
    *,
    state: str | None,
    name: str | None,
    cursor: str | None,
    limit: int | None,
    name_prefix: str | None = None,
    labels: list[str] | None = None,
) -> tuple[list[jobs_store.Job], str | None]:
    if state is not None and state not in REPORTED_JOB_STATES:
        raise errors.InvalidInput("state", f"must be one of {', '.join(REPORTED_JOB_STATES)}")
    wanted, selectors = job_rules.parse_label_selectors(labels or [])
    n = page_limit(limit)
    after = decode_cursor(cursor)
    rows = await db.transaction(
        lambda tx: tx.jobs.list_page(
            tenant_id,
            state=state,
            name=name,
            after=after,
            limit=n + 1,
            name_prefix=name_prefix or None,
            labels=wanted or None,
            selectors=[(s.key, s.op, s.values) for s in selectors],
        )
    )
    return split_page(rows, n, lambda j: (j.created_at, j.job_id))


async def executions(
    db: Database,
    tenant_id: UUID,
    job_id: UUID,
    cursor: str | None,
    limit: int | None,
) -> tuple[jobs_store.Job, list[jobs_store.ExecutionSummary], dict[UUID, list[Attempt]], str | None]:
    """A page of the job's executions, newest first, with every attempt of each."""
    n = page_limit(limit)
    before = decode_cursor(cursor)

    async def work(tx: Store) -> tuple[jobs_store.Job, list[jobs_store.ExecutionSummary], dict[UUID, list[Attempt]]]:
        job = await tx.jobs.get(tenant_id, job_id)
        if job is None:
            raise errors.JobNotFound()
        rows = await tx.jobs.executions_page(tenant_id, job_id, before=before, limit=n + 1)
        attempts = await tx.attempts.list_for_executions(tenant_id, [e.execution_id for e in rows[:n]])
        return job, rows, attempts

    job, rows, attempts = await db.read(work, fresh_if=(errors.JobNotFound,))  # the read replica, if any
    page, nxt = split_page(rows, n, lambda e: (e.scheduled_for, e.execution_id))
    return job, page, attempts, nxt


# -- state changes -------------------------------------------------------------------------------------


async def _moved(
    tx: Store, job: jobs_store.Job, to: JobState, nominal: datetime | None, run_at: datetime | None
) -> jobs_store.Job:
    updated = await tx.jobs.set_state(job, to, next_nominal_at=nominal, next_run_at=run_at)
    if updated is None:
        raise errors.InvalidStateTransition("the job changed concurrently; retry")
    return updated


async def _drop_buffered(tx: Store, job: jobs_store.Job) -> None:
    """A pause drops the buffer_one occurrence waiting on the job, recorded as skipped (paused), as Temporal
    takes no buffered start while paused; JobSetState clears the job's buffered_at."""
    if job.buffered_at is not None:
        await tx.jobs.record_skipped(
            job.job_id, job.tenant_id, job.queue, job.max_attempts, [job.buffered_at], "paused"
        )


async def _withdraw_ahead(tx: Store, job: jobs_store.Job) -> list[datetime]:
    """Take back the job's occurrences dispatched ahead that have not started; under a run limit they
    no longer count as started."""
    withdrawn = await tx.jobs.withdraw_ahead(job.tenant_id, job.job_id)
    if withdrawn and job.max_runs is not None:
        await tx.jobs.add_runs(job.job_id, -len(withdrawn))
    return withdrawn


async def pause(db: Database, tenant_id: UUID, job_id: UUID) -> jobs_store.Job:
    async def work(tx: Store) -> jobs_store.Job:
        job = await locked(tx, tenant_id, job_id)
        if job.state == JobState.PAUSED:
            return job
        # An occurrence dispatched ahead of its due time that has not started is taken back (a
        # one-off so dispatched already reads completed): the pause wins, and resume decides.
        withdrawn = await _withdraw_ahead(tx, job)
        if job.state != JobState.ACTIVE and not (withdrawn and job.state == JobState.COMPLETED):
            raise errors.InvalidStateTransition(f"a {job.state} job cannot be paused")
        await tx.jobs.delete_due(job.job_id)
        await _drop_buffered(tx, job)
        # The first occurrence the pause may make us miss.
        missed = [at for at in (*withdrawn, job.next_nominal_at) if at is not None]
        return await _moved(tx, job, JobState.PAUSED, min(missed) if missed else None, None)

    return await db.transaction(work)


async def resume(db: Database, tenant_id: UUID, job_id: UUID, missed: str) -> jobs_store.Job:
    async def work(tx: Store) -> jobs_store.Job:
        job = await locked(tx, tenant_id, job_id)
        if job.state == JobState.ACTIVE:
            return job
        if job.state != JobState.PAUSED:
            raise errors.InvalidStateTransition(f"a {job.state} job cannot be resumed")
        await _drop_buffered(tx, job)  # paused by pauseOnFailure before the BufferStarter dropped it
        now = utcnow()
        nominal, run_at = _resume_point(job, now, missed)
        skipped = _skipped_while_paused(job, now, nominal)
        if skipped:
            await tx.jobs.record_skipped(job.job_id, job.tenant_id, job.queue, job.max_attempts, skipped, "paused")
        if nominal is None:
            # A one-off job whose time passed while paused, and the caller chose to skip it.
            return await _moved(tx, job, JobState.COMPLETED, None, None)
        await tx.jobs.insert_due(job.job_id, job.tenant_id, nominal, run_at)
        return await _moved(tx, job, JobState.ACTIVE, nominal, run_at)

    return await db.transaction(work)


# A long pause records at most this many of the occurrences it skipped (the newest ones).
MAX_SKIPPED_RECORDS = 100


def _skipped_while_paused(job: jobs_store.Job, now: datetime, resumed_at: datetime | None) -> list[datetime]:
    """Nominal times that fell inside the pause and will not run: history records them as skipped."""
    first = job.next_nominal_at
    if first is None or first > now:
        return []
    if job.schedule_kind == "once":
        return [first] if resumed_at is None else []
    if job.schedule_kind == "every":
        grid = every_of(job)
        times: list[datetime] = []
        at = first
        while at <= now and len(times) < 10 * MAX_SKIPPED_RECORDS:
            times.append(at)
            at = grid.next_after(at)
        return [t for t in times[-MAX_SKIPPED_RECORDS:] if t != resumed_at]
    newest, _total = schedule_rules.missed_occurrences(
        cron_of(job), first - _EPSILON, now, str(job.job_id), cap=MAX_SKIPPED_RECORDS
    )
    return [o.nominal_utc for o in newest if o.nominal_utc != resumed_at]


def _resume_point(job: jobs_store.Job, now: datetime, missed: str) -> tuple[datetime | None, datetime]:
    """(nominal, run_at) of the occurrence to schedule on resume; nominal None: nothing left to run."""
    if job.schedule_kind == "once":
        assert job.run_at is not None
        if job.run_at > now:
            return job.run_at, job.run_at
        return (job.run_at, now) if missed == "run_once" else (None, now)
    if job.schedule_kind == "every":
        grid = every_of(job)
        jitter = timedelta(seconds=schedule_rules.jitter_offset_s(str(job.job_id), job.jitter_s))
        if missed == "run_once" and job.next_nominal_at is not None and job.next_nominal_at <= now:
            newest = grid.newest_at_or_before(now) or job.next_nominal_at
            return max(newest, job.next_nominal_at), now
        nxt = grid.next_after(now)
        return nxt, nxt + jitter
    schedule = cron_of(job)
    key = str(job.job_id)
    if missed == "run_once" and job.next_nominal_at is not None and job.next_nominal_at <= now:
        # The newest occurrence that fell inside the pause runs now (its own nominal time keeps it unique).
        missed_newest, _total = schedule_rules.missed_occurrences(
            schedule, job.next_nominal_at - _EPSILON, now, key, cap=1
        )
        if missed_newest:
            return missed_newest[-1].nominal_utc, now
    upcoming = schedule_rules.next_occurrence(schedule, now, key)
    return upcoming.nominal_utc, upcoming.run_at


async def cancel(db: Database, tenant_id: UUID, job_id: UUID) -> None:
    async def work(tx: Store) -> None:
        job = await locked(tx, tenant_id, job_id)
        if job.state == JobState.CANCELLED:
            return
        await tx.jobs.delete_due(job.job_id)
        await tx.jobs.cancel_unstarted(tenant_id, job.job_id)
        await _moved(tx, job, JobState.CANCELLED, None, None)

    await db.transaction(work)


# -- update, run now, backfill ------------------------------------------------------------------------


def merge_patch(base: Any, patch: Any) -> Any:
    """RFC 7396 JSON Merge Patch: objects merge key by key, null removes a key, anything else replaces."""
    if not isinstance(patch, dict):
        return patch
    out = dict(base) if isinstance(base, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# A schedule replaced by another drops the fields of its kind: {"schedule": {"cron": ...}} on a one-off.
# A kind is named by its own fields, not by tz and dst, which cron and a zoned every share.
_SCHEDULE_KINDS = ({"runAt", "delaySeconds"}, {"cron"}, {"every"})


def patched_body(job: jobs_store.Job, patch: dict[str, Any]) -> schemas.JobIn:
    base = views.job_as_body(job)
    new_schedule = patch.get("schedule")
    if isinstance(new_schedule, dict):
        for kind in _SCHEDULE_KINDS:
            if kind & set(new_schedule) and not kind & set(base["schedule"]):
                base["schedule"] = {}  # switching kinds: start from an empty schedule
        if {"runAt", "delaySeconds"} & set(new_schedule):
            base["schedule"].pop("runAt", None)
    merged = merge_patch(base, patch)
    schedule = merged.get("schedule")
    # An every without its zone is elapsed time: the zone's DST rules go with it unless the patch names them.
    unzoned = isinstance(schedule, dict) and "every" in schedule and "tz" not in schedule
    if unzoned and isinstance(new_schedule, dict) and "dst" not in new_schedule:
        schedule.pop("dst", None)
    try:
        return msgspec.convert(merged, schemas.JobIn, strict=True)
    except msgspec.ValidationError as exc:
        raise bodies.invalid_input(exc, schemas.JobIn, merged) from None


async def update(
    db: Database,
    settings: Settings,
    tenant_id: UUID,
    job_id: UUID,
    patch: Any,
    if_versions: frozenset[int] | None,
    payloads: PayloadStore | None = None,
) -> jobs_store.Job:
    """PATCH /v1/jobs/{jobId}: merge, validate as a new submit would, store, move the next occurrence.
    ``if_versions``: the versions If-Match names (None: no precondition, or ``*``)."""
    payloads = payloads or PayloadStore.from_settings(settings)
    if not isinstance(patch, dict) or not patch:
        raise errors.InvalidInput("body", "a JSON object with the fields to change (JSON Merge Patch)")
    if "idempotencyKey" in patch:
        raise errors.InvalidInput("idempotencyKey", "belongs to the submit, not to the job")

    async def work(tx: Store) -> jobs_store.Job:
        job = await locked(tx, tenant_id, job_id)
        if if_versions is not None and job.version not in if_versions:
            named = ", ".join(str(v) for v in if_versions) or "none"
            raise errors.PreconditionFailed(f"the job is at version {job.version}, not {named} (If-Match)")
        if job.state not in (JobState.ACTIVE, JobState.PAUSED):
            raise errors.InvalidStateTransition(
                f"a {job.reported_state} job cannot be updated; submit a new job instead"
            )
        now = utcnow()
        kept = job.payload_ref if "payload" not in patch else None  # a payload in the object store, unchanged
        if job.payload_ref is not None and kept is None:
            job = await large_payloads.whole(payloads, job)  # the merge patch merges into the whole payload
        new = build_spec(
            patched_body(job, patch),
            settings,
            now,
            job_id=job.job_id,
            every_anchor=job.anchor_at if job.schedule_kind == "every" else None,
        )
        limit = new.options.max_runs
        if limit is not None and job.max_runs is not None and limit <= job.run_count:
            raise errors.InvalidInput(
                "maxRuns",
                f"the schedule has started {job.run_count} occurrences under its limit: give more than "
                f"{job.run_count}, or null to remove the limit",
            )
        shared = job_rules.shared_pool_of(new.target)
        if shared is not None and not (await tx.jobs.shared_pool_access_many([(tenant_id, shared)])).get(
            (tenant_id, shared)
        ):
            raise not_granted(new.target.ref)
        row = new_job_row(Submission(new, tenant_id, None, None), job_rules.queue_for(new.target, tenant_id))
        if (ref := kept or await payloads.keep(tenant_id, row.payload)) is not None:
            row = msgspec.structs.replace(row, payload=None, payload_ref=ref)
        active = job.state == JobState.ACTIVE
        if active:
            # The old schedule's next occurrence goes, and so does one dispatched ahead of its time.
            await tx.jobs.delete_due(job.job_id)
            await _withdraw_ahead(tx, job)
            await tx.jobs.insert_due(job.job_id, tenant_id, row.next_nominal_at, row.next_run_at)
        else:
            row = _paused_row(row)
        updated = await tx.jobs.update(job, row)
        if updated is None:
            raise errors.InvalidStateTransition("the job changed concurrently; retry")
        if active and new.skipped_before_first:
            await tx.jobs.record_skipped(
                job.job_id,
                tenant_id,
                row.queue,
                row.max_attempts,
                [o.nominal_utc for o in new.skipped_before_first],
                "dst_gap",
            )
        return await tx.jobs.get(tenant_id, job_id) or updated

    return await db.transaction(work)


def _paused_row(row: jobs_store.NewJob) -> jobs_store.NewJob:
    """A paused job keeps no next run; resume computes it (from next_nominal_at, the first it may miss)."""
    return msgspec.structs.replace(row, next_run_at=None)
