"""Request and response bodies (camelCase on the wire), with the bounds they are validated against.

A field's bounds are declared here once, on its type, and give both the validation and the
OpenAPI document (app.api.openapi copies them into the schemas Litestar derives). Numeric ranges
are ``msgspec.Meta`` constraints: msgspec refuses a value outside them while decoding, and
app.api.bodies words the refusal as "must be between LOW and HIGH". Bounds whose refusal the
domain words more precisely (a name's NUL character, a label key's grammar, a header's value, a
method written in lower case) are validated by app.domain.jobs and declared here as document
only (``extra_json_schema``), from the same constants.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from app.api import bodies
from app.domain import jobs as job_rules
from app.domain import schedule as schedules
from app.domain.schedule.zone import MAX_TZ_LENGTH


class Wire(msgspec.Struct, rename="camel", forbid_unknown_fields=True, omit_defaults=False):
    pass


W = TypeVar("W", bound=Wire)


def decode_body(raw: bytes, type_: type[W]) -> W:
    """An optional JSON body (empty means all defaults), decoded strictly: bad JSON is MalformedBody,
    JSON that breaks the schema InvalidInput naming the field (app.api.bodies)."""
    return bodies.decode(raw, type_, empty=type_)


NO_NUL = "^[^\\u0000]*$"  # PostgreSQL refuses NUL in text


Name = Annotated[str, msgspec.Meta(extra_json_schema={
    "minLength": 1, "maxLength": job_rules.MAX_NAME_LEN, "pattern": "^[^\\u0000]*\\S[^\\u0000]*$"})]
TargetType = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["http", "queue"]})]
TargetRef = Annotated[str, msgspec.Meta(extra_json_schema={
    "minLength": 1, "maxLength": job_rules.MAX_URL_LEN, "pattern": NO_NUL})]
HttpMethod = Annotated[str, msgspec.Meta(extra_json_schema={"enum": list(job_rules.HTTP_METHODS)})]
HeaderValue = Annotated[str, msgspec.Meta(extra_json_schema={
    "maxLength": job_rules.MAX_HEADER_VALUE_LEN, "pattern": f"^{job_rules.HEADER_VALUE.pattern}$"})]
Headers = Annotated[dict[str, HeaderValue], msgspec.Meta(extra_json_schema={
    "maxProperties": job_rules.MAX_HEADERS, "propertyNames": {"pattern": f"^{job_rules.HEADER_NAME.pattern}$"}})]
LabelValue = Annotated[str, msgspec.Meta(extra_json_schema={"maxLength": job_rules.MAX_LABEL_VALUE_LEN,
                                                            "pattern": NO_NUL})]
Labels = Annotated[dict[str, LabelValue], msgspec.Meta(extra_json_schema={
    "maxProperties": job_rules.MAX_LABELS, "propertyNames": {"pattern": job_rules.LABEL_KEY.pattern}})]
DstGap = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["shift", "skip"]})]
DstRepeat = Annotated[str, msgspec.Meta(extra_json_schema={"enum": ["once", "twice"]})]
Cron = Annotated[str, msgspec.Meta(extra_json_schema={
    "minLength": 1, "maxLength": schedules.MAX_CRON_LENGTH, "pattern": NO_NUL})]
Every = Annotated[str, msgspec.Meta(extra_json_schema={"pattern": "^[0-9dhms]{1,40}$"})]
TimeZone = Annotated[str, msgspec.Meta(extra_json_schema={"minLength": 1, "maxLength": MAX_TZ_LENGTH,
                                                          "pattern": NO_NUL})]
Uuid = Annotated[str, msgspec.Meta(extra_json_schema={"format": "uuid"})]

# Validated while decoding; app.api.bodies words a refusal "must be between LOW and HIGH" (``low_name``
# in ``extra``: the field named as the low end instead of a number).
MaxAttempts = Annotated[int, msgspec.Meta(ge=1, le=job_rules.MAX_ATTEMPTS)]
BackoffSeconds = Annotated[float, msgspec.Meta(ge=0, le=job_rules.MAX_BACKOFF_S)]
MaxBackoffSeconds = Annotated[float, msgspec.Meta(ge=0, le=job_rules.MAX_BACKOFF_S,
                                                  extra={"low_name": "backoffSeconds"})]
MaxRetryDurationSeconds = Annotated[float, msgspec.Meta(gt=0, le=job_rules.MAX_RETRY_DURATION_S)]
TimeoutSeconds = Annotated[int, msgspec.Meta(ge=1, le=job_rules.MAX_TIMEOUT_S)]
DelaySeconds = Annotated[float, msgspec.Meta(ge=0, le=job_rules.MAX_DELAY_S)]
JitterSeconds = Annotated[int, msgspec.Meta(ge=0, le=job_rules.MAX_JITTER_S)]


class TargetIn(Wire):
    type: TargetType
    ref: TargetRef
    method: HttpMethod | None = None
    headers: Headers | None = None


class DstIn(Wire):
    gap: DstGap | None = None
    repeat: DstRepeat | None = None


# An ISO 8601 instant with an offset (2026-10-16T09:00:00Z), parsed by app.domain.jobs.parse_instant.
Instant = Annotated[str, msgspec.Meta(extra_json_schema={"format": "date-time"}, examples=["2026-10-16T09:00:00Z"])]


class ScheduleIn(Wire):
    run_at: Instant | None = None
    delay_seconds: DelaySeconds | None = None
    cron: Cron | None = None
    # An interval, anchored (EventBridge's rate()): "90s", "15m", "1h30m", "1d".
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
    concurrency: Literal["allow", "forbid", "replace"] | None = None
    misfire: Literal["run_once", "catch_up", "skip"] | None = None
    labels: Labels | None = None
    dry_run: bool = False


class BatchItemIn(JobIn):
    """One job of a batch: the fields of a single submit plus its own Idempotency-Key."""

    idempotency_key: Annotated[str, msgspec.Meta(min_length=1, max_length=255)] | None = None


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
    """How the job's executions ended so far, and how many are still to run."""

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
    concurrency: Literal["allow", "forbid", "replace"]
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
    # A payload over the inline limit is kept in the object store under this key: GET /v1/jobs/{jobId}
    # and PATCH answer it whole, lists and actions answer payload null.
    payload_ref: str | None = None


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


class FireTimeOut(Wire):
    # When it runs: the nominal time plus the jitter offset, in UTC and as wall time in the zone.
    utc: datetime
    local: str
    dst_note: str | None
    skipped: bool
    nominal_utc: datetime


class PreviewOut(Wire):
    fire_times: list[FireTimeOut]
    # What was evaluated: the expression as given (or stored) and resolved, zone, DST policy, jitter.
    schedule: ScheduleOut
    # The key's slot in the jitter window: the job's own with jobId, a placeholder's without.
    jitter_offset_seconds: int
    job_id: str | None = None


# -- dead letters ----------------------------------------------------------------------------------

class RetryOverride(Wire):
    """Replay with a different retry policy; a field left out keeps the job's."""

    max_attempts: Annotated[MaxAttempts | None, msgspec.Meta(description=(
        "How many attempts the replay grants, counted from the replay: 3 means up to three more attempts, "
        "whatever the execution spent before (attempt numbers keep counting up). Left out: the job's "
        "maxAttempts."))] = None
    backoff_seconds: BackoffSeconds | None = None
    max_backoff_seconds: BackoffSeconds | None = None


class ReplayIn(Wire):
    """Replay one dead execution; ``payload`` left out keeps the job's payload."""

    payload: Any = msgspec.UNSET
    retry: RetryOverride | None = None


# An instant with its offset; a naive one is ambiguous and refused (msgspec's tz=True).
AwareDatetime = Annotated[datetime, msgspec.Meta(tz=True)]


# How many dead executions one bulk replay takes at most.
BULK_REPLAY_MAX = 1000


class BulkReplayIn(Wire):
    """Replay up to ``limit`` dead executions of a job or finished in a window (all optional)."""

    job_id: Uuid | None = None
    finished_after: AwareDatetime | None = None
    finished_before: AwareDatetime | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=BULK_REPLAY_MAX)] = 100


class DeadLetterOut(Wire):
    execution_id: str
    job_id: str
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    finished_at: datetime
    error: str | None


class ReplayedOut(Wire):
    execution_id: str
    job_id: str
    state: str
    attempt: Annotated[int, msgspec.Meta(description=(
        "Attempts the execution made before the replay; the next one is attempt + 1."))]
    max_attempts: Annotated[int, msgspec.Meta(description=(
        "Attempts the replay grants, counted from the replay: retry.maxAttempts of the request, or the "
        "job's maxAttempts."))]
    ready_at: datetime
    last_attempt: Annotated[int, msgspec.Meta(description=(
        "The attempt number after which the execution is dead again if every attempt fails: "
        "attempt + maxAttempts."))]


class BulkReplayedOut(Wire):
    replayed: int
    execution_ids: list[str]
    budget_left: int
    budget_resets_at: datetime


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
