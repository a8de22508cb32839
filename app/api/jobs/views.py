"""A stored job and its executions as the wire shows them, converted by field name."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import msgspec

from app.api.dead_letters.service import attempt_out
from app.api.jobs import schemas
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.store import jobs as jobs_store
from app.store.attempts import Attempt


class JobView:
    """A stored job read by the wire's field names, for ``msgspec.convert(..., from_attributes=True)``.

    The row's columns pass through by name (``getattr`` falls through to the row); the properties
    below are the only fields the wire names, nests or computes differently. The nested objects
    (target, schedule, dst, retry) read the same view. ``instants``: how the schedule's instants are
    given: as datetimes (an answer) or ISO text (a submit body)."""

    __slots__ = ("_text", "counts", "job")

    def __init__(
        self, job: jobs_store.Job, counts: jobs_store.ExecutionCounts | None = None, *, text: bool = False
    ) -> None:
        self.job = job
        self.counts = counts
        self._text = text

    def __getattr__(self, name: str) -> Any:
        return getattr(self.job, name)

    def _instant(self, at: datetime | None) -> datetime | str | None:
        return at.isoformat() if self._text and at is not None else at

    # JobOut / JobIn
    @property
    def job_id(self) -> str:
        return str(self.job.job_id)

    @property
    def state(self) -> str:
        return self.job.reported_state

    @property
    def target(self) -> JobView:
        return self

    @property
    def schedule(self) -> JobView:
        return self

    @property
    def retry(self) -> JobView:
        return self

    @property
    def timeout_seconds(self) -> int:
        return self.job.timeout_s

    @property
    def executions(self) -> jobs_store.ExecutionCounts | None:
        return self.counts

    @property
    def remaining_runs(self) -> int | None:
        return None if self.job.max_runs is None else max(0, self.job.max_runs - self.job.run_count)

    @property
    def delete_after_completion_seconds(self) -> int | None:
        return self.job.delete_after_s

    # TargetOut / TargetIn
    @property
    def type(self) -> str:
        return self.job.target_type

    @property
    def ref(self) -> str:
        return self.job.target_ref

    @property
    def method(self) -> str | None:
        return self.job.http_method if self.job.target_type == "http" else None

    @property
    def headers(self) -> dict[str, str] | None:
        return self.job.http_headers if self.job.target_type == "http" else None

    # ScheduleOut / ScheduleIn
    @property
    def run_at(self) -> datetime | str | None:
        return self._instant(self.job.run_at)

    @property
    def start_at(self) -> datetime | str | None:
        return self._instant(self.job.start_at)

    @property
    def end_at(self) -> datetime | str | None:
        return self._instant(self.job.end_at)

    @property
    def every(self) -> str | None:
        return job_rules.format_every(self.job.every_s) if self.job.every_s else None

    @property
    def jitter_seconds(self) -> int | None:
        return self.job.jitter_s if self.job.schedule_kind != "once" else None

    @property
    def dst(self) -> JobView | None:
        zoned = self.job.schedule_kind == "cron" or (self.job.schedule_kind == "every" and self.job.tz is not None)
        return self if zoned else None

    @property
    def gap(self) -> str:
        return self.job.dst_gap

    @property
    def repeat(self) -> str:
        return self.job.dst_repeat

    # RetryOut / RetryIn
    @property
    def backoff_seconds(self) -> float:
        return self.job.backoff_s

    @property
    def max_backoff_seconds(self) -> float:
        return self.job.max_backoff_s

    @property
    def max_retry_duration_seconds(self) -> float | None:
        return self.job.max_retry_duration_s


def job_out(job: jobs_store.Job, counts: jobs_store.ExecutionCounts | None = None) -> schemas.JobOut:
    out = msgspec.convert(JobView(job, counts), schemas.JobOut, from_attributes=True)
    if job.http_auth and job.target_type == "http":  # absent otherwise: the target reads as it was submitted
        out.target.auth = msgspec.convert(job.http_auth, schemas.TargetAuth)
    return out


def job_as_body(job: jobs_store.Job) -> dict[str, Any]:
    """A stored job as the JobIn body that would create it (what a PATCH is merged into): the fields
    a submit of its kind leaves out are absent. An every job's grid (its anchor) is passed apart: an
    update keeps it unless the patch names a new startAt."""
    body = msgspec.to_builtins(msgspec.convert(JobView(job, text=True), schemas.JobIn, from_attributes=True))
    for part in (body, body["target"], body["schedule"], body["retry"]):
        for key in [k for k, v in part.items() if v is None and k != "payload"]:
            del part[key]
    if job.http_auth and job.target_type == "http":
        body["target"]["auth"] = job.http_auth
    return body  # type: ignore[no-any-return]


def execution_out(
    job: jobs_store.Job,
    e: jobs_store.ExecutionSummary,
    attempts: list[Attempt] | None = None,
) -> schemas.ExecutionOut:
    """One execution with its start lag: due at the nominal time plus the job's jitter offset (manual
    runs and backfills carry no jitter), started when its first attempt was leased."""
    error = e.error if e.error is not None else (f"skipped: {e.skip_reason}" if e.skip_reason else None)
    jitter = job.jitter_s if job.schedule_kind != "once" and e.trigger == "schedule" else 0
    offset_s = schedule_rules.jitter_offset_s(str(job.job_id), jitter) if jitter else 0
    due_at = e.scheduled_for + timedelta(seconds=offset_s) if jitter else e.scheduled_for
    lag_ms = None if e.first_started_at is None else max(0, round((e.first_started_at - due_at).total_seconds() * 1000))
    # The store's state, skip_reason and trigger columns hold only the values the wire's Literals list.
    return schemas.ExecutionOut(
        str(e.execution_id),
        e.scheduled_for,
        e.attempt,
        e.state.value,
        e.started_at,
        e.finished_at,
        error,
        skip_reason=e.skip_reason,  # type: ignore[arg-type]
        trigger=e.trigger,  # type: ignore[arg-type]
        due_at=due_at,
        dispatched_at=e.dispatched_at,
        first_started_at=e.first_started_at,
        start_lag_ms=lag_ms,
        trace_id=e.traceparent.split("-")[1] if e.traceparent else None,
        attempts=[attempt_out(a) for a in attempts or ()],
        paused_job=True if e.execution_id == job.pause_execution_id else msgspec.UNSET,
    )
