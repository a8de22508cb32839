"""What the job endpoints do, one transaction each, scoped to one tenant."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import msgspec

from app import errors
from app.api import bodies, problems
from app.api.jobs import large_payloads, schemas, views
from app.api.jobs.submit import Created, Submission, SubmitWriter, new_job_row, not_granted
from app.api.pagination import decode_cursor, page_limit, split_page
from app.config import Settings
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.domain.ids import random_uuid
from app.domain.states import REPORTED_JOB_STATES, JobState
from app.executor.delivery_egress import policy_for as egress_policy
from app.observability import tracing
from app.store import Database, Store
from app.store import dispatch as dispatch_store
from app.store import jobs as jobs_store
from app.store.attempts import Attempt
from app.store.payloads import PayloadStore

log = logging.getLogger(__name__)
_EPSILON = timedelta(microseconds=1)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def build_spec(
    body: schemas.JobIn,
    settings: Settings,
    now: datetime,
    job_id: UUID | None = None,
    every_anchor: datetime | None = None,
) -> job_rules.JobSpec:
    """Validate everything that needs no database; raises InvalidInput naming the field.

    ``job_id``: an existing job's (an update keeps its id, so H tokens resolve the same).
    ``every_anchor``: an existing every job's grid, kept when the body names no startAt."""
    job_id = job_id or random_uuid()
    name = job_rules.validate_name(body.name)
    target = job_rules.validate_target(body.target.type, body.target.ref, egress_policy(settings))
    payload_text = job_rules.payload_json(body.payload, settings.payload_max_bytes)
    r = body.retry or schemas.RetryIn()
    retry = job_rules.validate_retry(r.max_attempts, r.backoff_seconds, r.max_backoff_seconds)
    timeout_s = job_rules.validate_timeout(body.timeout_seconds)
    method, headers = job_rules.validate_http(target, body.target.method, body.target.headers)
    auth = body.target.auth
    http_auth = job_rules.validate_auth(target, auth.type if auth else None, auth.audience if auth else None, headers)
    start_at, end_at = job_rules.validate_bounds(body.schedule.start_at, body.schedule.end_at)
    if start_at is not None:
        job_rules.within_horizon(start_at, now, settings.max_schedule_horizon_days, "schedule.startAt")
    options = job_rules.Options(
        labels=job_rules.validate_labels(body.labels),
        start_at=start_at,
        end_at=end_at,
        dry_run=body.dry_run,
        max_retry_duration_s=job_rules.validate_retry_duration(r.max_retry_duration_seconds),
        http_method=method,
        http_headers=headers,
        http_auth=http_auth,
    )
    s = body.schedule
    given = [
        k
        for k, v in (("runAt", s.run_at), ("delaySeconds", s.delay_seconds), ("cron", s.cron), ("every", s.every))
        if v is not None
    ]
    if len(given) != 1:
        raise errors.InvalidInput(
            "schedule",
            "give exactly one of runAt, delaySeconds, cron or every" + (f" (got {', '.join(given)})" if given else ""),
        )
    common: dict[str, Any] = {
        "job_id": job_id,
        "name": name,
        "target": target,
        "payload": body.payload,
        "payload_json": payload_text,
        "retry": retry,
        "timeout_s": timeout_s,
        "concurrency": body.concurrency or "allow",
        "misfire": body.misfire or "run_once",
        "options": options,
    }
    if s.every is not None:
        every = job_rules.every_schedule(
            s.every,
            s.jitter_seconds,
            start_at or every_anchor,
            now,
            settings.min_fire_interval_s,
            tz=s.tz,
            dst=job_rules.dst_policy(s.dst.gap, s.dst.repeat) if s.dst is not None else None,
        )
        if end_at is not None and (every.first or every.anchor) > end_at:
            raise errors.InvalidInput("schedule.endAt", "no occurrence falls before endAt")
        return job_rules.JobSpec(schedule=every, skipped_before_first=every.skipped_before_first(now), **common)
    if s.cron is None:
        if s.tz is not None or s.jitter_seconds is not None or s.dst is not None:
            raise errors.InvalidInput("schedule", "tz, jitterSeconds and dst apply to cron schedules only")
        if start_at is not None or end_at is not None:
            raise errors.InvalidInput("schedule", "startAt and endAt bound recurring schedules only")
        once = job_rules.once_schedule(s.run_at, s.delay_seconds, now, settings.max_schedule_horizon_days)
        return job_rules.JobSpec(schedule=once, **common)
    dst = s.dst or schemas.DstIn()
    schedule, resolved = job_rules.cron_schedule(
        s.cron, s.tz, s.jitter_seconds, dst.gap, dst.repeat, str(job_id), min_interval_s=settings.min_fire_interval_s
    )
    # The first occurrence at or after startAt (a schedule that starts later waits for it).
    after = max(now, start_at - _EPSILON) if start_at is not None else now
    first, skipped = job_rules.first_occurrence(
        schedule, resolved, after, str(job_id), settings.max_schedule_horizon_days + max(0, (after - now).days)
    )
    if end_at is not None and first.nominal_utc > end_at:
        raise errors.InvalidInput(
            "schedule.endAt", f"no occurrence falls before endAt (the first is {first.nominal_utc.isoformat()})"
        )
    return job_rules.JobSpec(
        schedule=schedule, cron_resolved=resolved, first=first, skipped_before_first=skipped, **common
    )


def submission(
    body: schemas.JobIn,
    settings: Settings,
    tenant_id: UUID,
    idem_key: str | None,
    fingerprint: str | None,
    now: datetime,
    traceparent: str | None = None,
) -> Submission:
    """A validated job to store; raises InvalidInput naming the field."""
    if idem_key is not None and not 1 <= len(idem_key) <= 255:
        raise errors.InvalidInput("Idempotency-Key", "must be 1-255 characters")
    return Submission(
        build_spec(body, settings, now), tenant_id, idem_key, fingerprint if idem_key else None, traceparent
    )


class JobSubmitter:
    """The one implementation of a submit: POST /v1/jobs (the route and its fast path,
    app.api.jobs.fast_submit) and each item of POST /v1/jobs:batch. Validates, keeps a large payload
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
        return job, await tx.jobs.execution_counts(tenant_id, job_id)

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


def _every_of(job: jobs_store.Job) -> job_rules.EverySchedule:
    assert job.every_s is not None and job.anchor_at is not None
    return job_rules.stored_every(job.every_s, job.anchor_at, job.jitter_s, job.tz, job.dst_gap, job.dst_repeat)


def _cron_of(job: jobs_store.Job) -> schedule_rules.CronSchedule:
    assert job.cron_resolved is not None and job.tz is not None
    return job_rules.stored_schedule(job.cron_resolved, job.tz, job.jitter_s, job.dst_gap, job.dst_repeat)


async def _locked(tx: Store, tenant_id: UUID, job_id: UUID) -> jobs_store.Job:
    job = await tx.jobs.get(tenant_id, job_id, for_update=True)
    if job is None:
        raise errors.JobNotFound()
    return job


async def _moved(
    tx: Store, job: jobs_store.Job, to: JobState, nominal: datetime | None, run_at: datetime | None
) -> jobs_store.Job:
    updated = await tx.jobs.set_state(job, to, next_nominal_at=nominal, next_run_at=run_at)
    if updated is None:
        raise errors.InvalidStateTransition("the job changed concurrently; retry")
    return updated


async def pause(db: Database, tenant_id: UUID, job_id: UUID) -> jobs_store.Job:
    async def work(tx: Store) -> jobs_store.Job:
        job = await _locked(tx, tenant_id, job_id)
        if job.state == JobState.PAUSED:
            return job
        # An occurrence dispatched ahead of its due time that has not started is taken back (a
        # one-off so dispatched already reads completed): the pause wins, and resume decides.
        withdrawn = await tx.jobs.withdraw_ahead(tenant_id, job.job_id)
        if job.state != JobState.ACTIVE and not (withdrawn and job.state == JobState.COMPLETED):
            raise errors.InvalidStateTransition(f"a {job.state} job cannot be paused")
        await tx.jobs.delete_due(job.job_id)
        # The first occurrence the pause may make us miss.
        missed = [at for at in (*withdrawn, job.next_nominal_at) if at is not None]
        return await _moved(tx, job, JobState.PAUSED, min(missed) if missed else None, None)

    return await db.transaction(work)


async def resume(db: Database, tenant_id: UUID, job_id: UUID, missed: str) -> jobs_store.Job:
    async def work(tx: Store) -> jobs_store.Job:
        job = await _locked(tx, tenant_id, job_id)
        if job.state == JobState.ACTIVE:
            return job
        if job.state != JobState.PAUSED:
            raise errors.InvalidStateTransition(f"a {job.state} job cannot be resumed")
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
        grid = _every_of(job)
        times: list[datetime] = []
        at = first
        while at <= now and len(times) < 10 * MAX_SKIPPED_RECORDS:
            times.append(at)
            at = grid.next_after(at)
        return [t for t in times[-MAX_SKIPPED_RECORDS:] if t != resumed_at]
    newest, _total = schedule_rules.missed_occurrences(
        _cron_of(job), first - _EPSILON, now, str(job.job_id), cap=MAX_SKIPPED_RECORDS
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
        grid = _every_of(job)
        jitter = timedelta(seconds=schedule_rules.jitter_offset_s(str(job.job_id), job.jitter_s))
        if missed == "run_once" and job.next_nominal_at is not None and job.next_nominal_at <= now:
            newest = grid.newest_at_or_before(now) or job.next_nominal_at
            return max(newest, job.next_nominal_at), now
        nxt = grid.next_after(now)
        return nxt, nxt + jitter
    schedule = _cron_of(job)
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
        job = await _locked(tx, tenant_id, job_id)
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
        job = await _locked(tx, tenant_id, job_id)
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
        shared = job_rules.shared_pool_of(new.target)
        if shared is not None and not (await tx.jobs.shared_pool_access_many([(tenant_id, shared)])).get(
            (tenant_id, shared)
        ):
            raise not_granted(new.target.ref)
        row = new_job_row(Submission(new, tenant_id, None, None), job_rules.queue_for(new.target, tenant_id))
        if (ref := kept or await payloads.keep(tenant_id, row.payload)) is not None:
            row = replace(row, payload=None, payload_ref=ref)
        active = job.state == JobState.ACTIVE
        if active:
            # The old schedule's next occurrence goes, and so does one dispatched ahead of its time.
            await tx.jobs.delete_due(job.job_id)
            await tx.jobs.withdraw_ahead(tenant_id, job.job_id)
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
    return replace(row, next_run_at=None)  # type: ignore[arg-type]


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
        job = await _locked(tx, tenant_id, job_id)
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
        yield from schedule_rules.occurrences_after(_cron_of(job), start - _EPSILON, str(job.job_id))
        return
    yield from _every_of(job).occurrences_after(start - _EPSILON)


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
        job = await _locked(tx, tenant_id, job_id)
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
