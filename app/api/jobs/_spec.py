"""Building a job's specification from a submit body: every check that needs no database."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from app import errors
from app.api import wire
from app.api.jobs import schemas
from app.api.jobs.submit import Submission
from app.config import Settings
from app.domain import http_target
from app.domain import jobs as job_rules
from app.domain.ids import random_uuid
from app.executor.delivery_egress import policy_for as egress_policy

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
    name = body.name  # its bounds are its wire type's (app.api.wire.Name), checked while decoding
    target = job_rules.validate_target(body.target.type, body.target.ref, egress_policy(settings))
    payload_text = job_rules.payload_json(body.payload, settings.payload_max_bytes)
    r = body.retry or schemas.RetryIn()
    retry = job_rules.validate_retry(r.max_attempts, r.backoff_seconds, r.max_backoff_seconds)
    timeout_s = job_rules.validate_timeout(body.timeout_seconds)
    method, headers = http_target.validate_http(target.type, body.target.method, body.target.headers)
    auth = body.target.auth
    http_auth = http_target.validate_auth(
        target.type, auth.type if auth else None, auth.audience if auth else None, headers
    )
    start_at, end_at = job_rules.validate_bounds(body.schedule.start_at, body.schedule.end_at)
    if start_at is not None:
        job_rules.within_horizon(start_at, now, settings.max_schedule_horizon_days, "schedule.startAt")
    s = body.schedule
    pause_on_failure, max_runs = job_rules.validate_lifecycle(
        s.cron is not None or s.every is not None, body.pause_on_failure, body.max_runs
    )
    options = job_rules.Options(
        labels=dict(body.labels or {}),  # bounded by its wire type (app.api.wire.Labels) while decoding
        start_at=start_at,
        end_at=end_at,
        dry_run=body.dry_run,
        max_retry_duration_s=job_rules.validate_retry_duration(r.max_retry_duration_seconds),
        http_method=method,
        http_headers=headers,
        http_auth=http_auth,
        pause_on_failure=pause_on_failure,
        max_runs=max_runs,
        delete_after_s=body.delete_after_completion_seconds,
    )
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
    if idem_key is not None and not 1 <= len(idem_key) <= wire.IDEMPOTENCY_KEY_MAX:
        raise errors.InvalidInput("Idempotency-Key", f"must be 1-{wire.IDEMPOTENCY_KEY_MAX} characters")
    return Submission(
        build_spec(body, settings, now), tenant_id, idem_key, fingerprint if idem_key else None, traceparent
    )
