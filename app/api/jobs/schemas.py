"""The bodies of /v1/jobs (camelCase on the wire; field types and their bounds from app.api.wire)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec

from app.api.wire import (
    Audience,
    BackoffSeconds,
    Cron,
    DelaySeconds,
    DeleteAfterSeconds,
    DstGap,
    DstRepeat,
    Every,
    Headers,
    HttpMethod,
    IdempotencyKey,
    Instant,
    JitterSeconds,
    Labels,
    MaxAttempts,
    MaxBackoffSeconds,
    MaxRetryDurationSeconds,
    MaxRuns,
    Name,
    TargetRef,
    TargetType,
    TimeoutSeconds,
    TimeZone,
    Wire,
)

PAUSE_ON_FAILURE = (
    "recurring jobs only: when an occurrence the schedule started is dead-lettered, the job pauses itself "
    "(pausedReason names the dead letter); manual runs and backfills never pause it. Resume with :resume"
)
MAX_RUNS = (
    "recurring jobs only: the schedule completes once it has started this many occurrences (counted from "
    "when maxRuns was set; skipped occurrences, manual runs and backfills do not count, dry-run "
    "occurrences do; a buffer_one occurrence counts when it starts, not while it waits). A PATCH may raise "
    "it, never to or below the occurrences already started; null removes the limit"
)
DELETE_AFTER = (
    "once the job is completed or cancelled, its last execution has finished and no buffer_one occurrence "
    "waits, it is removed this many "
    "seconds later: the job row and its history go to the archive (docs/retention.md); null keeps it"
)


class TargetAuth(Wire, omit_defaults=True):
    """An HTTP target's signed identity token (docs/http-delivery.md, "Identity tokens")."""

    type: Literal["oidc"]
    audience: Audience | None = None


class TargetIn(Wire):
    type: TargetType
    ref: TargetRef
    method: HttpMethod | None = None
    headers: Headers | None = None
    auth: TargetAuth | None = None


class DstIn(Wire):
    gap: DstGap | None = None
    repeat: DstRepeat | None = None


class ScheduleIn(Wire):
    run_at: Instant | None = None
    delay_seconds: DelaySeconds | None = None
    cron: Cron | None = None
    # An interval, anchored (EventBridge's rate()): "90s", "15m", "1h30m", "1d"; with tz, whole days at the
    # anchor's wall-clock time there (app.domain.schedule.interval).
    every: Every | None = None
    tz: TimeZone | None = None
    jitter_seconds: JitterSeconds | None = None
    dst: DstIn | None = None
    start_at: Instant | None = None
    end_at: Instant | None = None


class RetryIn(Wire):
    max_attempts: MaxAttempts | None = None
    backoff_seconds: BackoffSeconds | None = None
    max_backoff_seconds: MaxBackoffSeconds | None = None
    max_retry_duration_seconds: MaxRetryDurationSeconds | None = None


class JobIn(Wire):
    name: Name
    target: TargetIn
    schedule: ScheduleIn
    payload: Any = None
    retry: RetryIn | None = None
    timeout_seconds: TimeoutSeconds | None = None
    concurrency: Literal["allow", "forbid", "replace", "buffer_one"] | None = None
    misfire: Literal["run_once", "catch_up", "skip"] | None = None
    labels: Labels | None = None
    dry_run: bool = False
    # How the job ends (docs/states.md, "Lifecycle options"). Recurring jobs only: a dead-lettered
    # scheduled occurrence pauses the job; the schedule completes after maxRuns occurrences it started.
    pause_on_failure: Annotated[bool, msgspec.Meta(description=PAUSE_ON_FAILURE)] = False
    max_runs: Annotated[MaxRuns, msgspec.Meta(description=MAX_RUNS)] | None = None
    # Any job: once completed or cancelled and its last execution finished this long ago, it goes to
    # the archive with its history (docs/retention.md, "Removing finished jobs").
    delete_after_completion_seconds: Annotated[DeleteAfterSeconds, msgspec.Meta(description=DELETE_AFTER)] | None = None


class BatchItemIn(JobIn):
    """One job of a batch: the fields of a single submit plus its own Idempotency-Key."""

    idempotency_key: IdempotencyKey | None = None


class BatchIn(msgspec.Struct, forbid_unknown_fields=True):
    """POST /v1/jobs:batch. Items stay raw here: each is decoded and validated on its own."""

    jobs: list[msgspec.Raw]


class BatchShape(msgspec.Struct):
    """What a batch body holds once its items are decoded: names the fields of a batch's problems."""

    jobs: list[BatchItemIn]


class BatchItemOut(Wire, omit_defaults=True):
    """A stored job (jobId, nextRunAt) or, for an item that was refused, its problem object and index."""

    job_id: str | None = None
    next_run_at: datetime | None = None
    error: dict[str, Any] | None = None
    index: int | None = None
    warnings: list[str] | None = None


class BatchOut(Wire):
    results: list[BatchItemOut]


class JobCreated(Wire, omit_defaults=True):
    job_id: str
    next_run_at: datetime | None
    # Advice that does not refuse the job, e.g. the herd warning (many occurrences due in one minute);
    # absent when there is none.
    warnings: list[str] | None = None


class TargetOut(Wire):
    type: str
    ref: str
    method: str | None = None
    headers: dict[str, str] | None = None
    # Absent (not null) when the target asks for no token, so a target reads as it was submitted.
    auth: TargetAuth | msgspec.UnsetType = msgspec.UNSET


class ScheduleOut(Wire):
    run_at: datetime | None = None
    cron: str | None = None
    # The expression the scheduler evaluates: H tokens, names and shorthands resolved for this job.
    cron_resolved: str | None = None
    every: str | None = None
    anchor_at: datetime | None = None
    tz: str | None = None
    jitter_seconds: int | None = None
    dst: DstIn | None = None
    start_at: datetime | None = None
    end_at: datetime | None = None


class RetryOut(Wire):
    max_attempts: int
    backoff_seconds: float
    max_backoff_seconds: float
    max_retry_duration_seconds: float | None = None


class ExecutionCounts(Wire):
    """How the job's newest executions (up to 1,000) ended, and how many of them are still to run."""

    succeeded: int = 0
    dead: int = 0
    cancelled: int = 0
    skipped: int = 0
    pending: int = 0


class JobOut(Wire):
    job_id: str
    name: str
    state: Literal["active", "paused", "completed", "failed", "cancelled"]
    target: TargetOut
    schedule: ScheduleOut
    payload: Any
    retry: RetryOut
    timeout_seconds: int
    concurrency: Literal["allow", "forbid", "replace", "buffer_one"]
    misfire: Literal["run_once", "catch_up", "skip"]
    next_run_at: datetime | None
    paused_at: datetime | None
    created_at: datetime
    updated_at: datetime
    version: int
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    dry_run: bool = False
    # The state of the newest finished execution (succeeded, dead, cancelled, skipped) and when.
    last_outcome: str | None = None
    last_finished_at: datetime | None = None
    # On GET /v1/jobs/{jobId} only.
    executions: ExecutionCounts | None = None
    # concurrency buffer_one: the occurrence (its nominal time) waiting for the running execution to settle.
    buffered_at: datetime | None = None
    # A payload over the inline limit is kept in the object store under this key: GET /v1/jobs/{jobId}
    # and PATCH answer it whole, lists and actions answer payload null.
    payload_ref: str | None = None
    pause_on_failure: Annotated[bool, msgspec.Meta(description=PAUSE_ON_FAILURE)] = False
    # Why the job paused itself (the dead letter that paused it); null when paused through the API or active.
    paused_reason: Annotated[
        str | None,
        msgspec.Meta(
            description="why Kairos paused the job (pauseOnFailure: the dead letter that paused it); null "
            "when the tenant paused it or it is not paused"
        ),
    ] = None
    max_runs: Annotated[int | None, msgspec.Meta(description=MAX_RUNS)] = None
    remaining_runs: Annotated[
        int | None,
        msgspec.Meta(
            description="maxRuns minus the occurrences the schedule has started since maxRuns was set; "
            "null without maxRuns"
        ),
    ] = None
    delete_after_completion_seconds: Annotated[int | None, msgspec.Meta(description=DELETE_AFTER)] = None


class JobPage(Wire):
    jobs: list[JobOut]
    next_cursor: str | None


class ResumeIn(Wire):
    missed: Literal["skip", "run_once"] = "skip"


class RunIn(Wire):
    """POST /v1/jobs/{jobId}:run. ``overlap`` overrides the job's concurrency policy for this run."""

    overlap: Literal["allow", "forbid", "replace"] | None = None


class RunOut(Wire):
    execution_id: str
    job: JobOut


class BackfillIn(Wire):
    """POST /v1/jobs/{jobId}:backfill: the occurrences of [from, to) (both in the past), at most 1,000 per call."""

    from_: Instant = msgspec.field(name="from")
    to: Instant
    overlap: Literal["allow", "forbid"] | None = None


class BackfillOut(Wire, omit_defaults=True):
    created: int
    # Occurrences in the range that already had an execution (run by the schedule or an earlier backfill).
    existing: int
    # Set when the range held more than 1,000 occurrences: call again with from = nextFrom.
    next_from: datetime | None
    # Why nothing was created when the schedule has no occurrence in the range (e.g. it lies before the
    # anchor of an every schedule); absent otherwise.
    note: str | None = None


class ExecutionOut(Wire):
    execution_id: str
    scheduled_for: datetime
    attempt: int
    state: Literal["ready", "leased", "succeeded", "dead", "cancelled", "skipped"]
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    skip_reason: Literal["overlap", "misfire", "dst_gap", "dry_run", "paused"] | None = None
    # schedule, manual (POST :run) or backfill (POST :backfill).
    trigger: Literal["schedule", "manual", "backfill"] = "schedule"
    # When it was due: the nominal time plus the job's jitter offset (its first ready_at).
    due_at: datetime | None = None
    dispatched_at: datetime | None = None
    first_started_at: datetime | None = None
    start_lag_ms: int | None = None
    # The occurrence's trace (W3C trace id), as its HTTP deliveries carried it in traceparent.
    trace_id: str | None = None
    # Every attempt, oldest first, discarded late results included ("this ran twice, here is why").
    attempts: list[AttemptOut] = msgspec.field(default_factory=list)
    # Present (true) only on the dead letter that last paused its job (jobs.pause_execution_id).
    paused_job: (
        Annotated[
            bool,
            msgspec.Meta(
                description="present, true, on the dead letter that last paused its job (pauseOnFailure)",
            ),
        ]
        | msgspec.UnsetType
    ) = msgspec.UNSET


class AttemptOut(Wire):
    attempt: int
    worker_id: str
    leased_at: datetime
    lease_until: datetime
    finished_at: datetime | None
    outcome: Literal["running", "succeeded", "failed", "expired", "cancelled", "discarded"]
    error: str | None
    result: Any
    # An HTTP delivery's attempt starts when its request is sent (after its lease, when it waited for a
    # slot of its origin); absent for a worker's attempt, which starts at its lease.
    sent_at: datetime | None = None
