"""Jobs, their due_index row, and their execution history (the API's side)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from operator import attrgetter
from typing import Any, get_args, get_origin, get_type_hints
from uuid import UUID

import msgspec
from sqlalchemy import Row

from app.domain.jsontext import compact_json
from app.domain.shards import SHARD_COUNT, due_minute, shard_of
from app.domain.states import ExecutionState, JobState, ReportedJobState, reported_job_state
from app.store.arrays import plain, texts
from app.store.partitions import Partitions
from app.store.queries import q
from app.store.table import Table

# JobList's cut before its per-job lookups when the reported state is filtered on: none.
JOB_LIST_SCAN_ALL = 2_147_483_647


class NewJob(msgspec.Struct, kw_only=True):
    """A validated job as the API inserts it.

    A msgspec Struct: it is built once per submitted job with some 40 fields, and a Struct's
    constructor (C) costs a fraction of a dataclass's (a frozen dataclass sets each field through
    ``object.__setattr__``). Nothing changes one after it is built (``msgspec.structs.replace``
    makes a new one)."""

    job_id: UUID
    tenant_id: UUID
    name: str
    target_type: str
    target_ref: str
    queue: str
    payload: Any
    schedule_kind: str
    run_at: datetime | None
    cron: str | None
    cron_resolved: str | None
    tz: str | None
    jitter_s: int
    dst_gap: str
    dst_repeat: str
    max_attempts: int
    backoff_s: float
    max_backoff_s: float
    timeout_s: int
    concurrency: str
    misfire: str
    next_nominal_at: datetime
    next_run_at: datetime
    idempotency_key: str | None
    request_hash: str | None
    start_at: datetime | None
    end_at: datetime | None
    every_s: int | None
    anchor_at: datetime | None
    labels: dict[str, str]
    dry_run: bool
    max_retry_duration_s: float | None
    http_method: str
    http_headers: dict[str, str]
    traceparent: str | None
    # Set when the payload is kept in the object store (app.store.payloads); payload is then None.
    payload_ref: str | None
    # The inline payload's compact JSON when the submit has it (validation wrote it); else encoded here.
    payload_json: str | None = None
    # An HTTP target's auth object ({"type": "oidc", "audience": ...}, docs/http-delivery.md); None: none.
    http_auth: dict[str, Any] | None = None
    # How the job ends (app.domain.jobs.Options): pause on a dead-lettered scheduled occurrence, complete
    # after max_runs scheduled occurrences, removed delete_after_s after it finished.
    pause_on_failure: bool = False
    max_runs: int | None = None
    delete_after_s: int | None = None


class Job(NewJob, kw_only=True):
    """A stored job: what was submitted plus its lifecycle columns.

    next_nominal_at/next_run_at are NULL once the schedule has ended."""

    state: JobState
    first_run_at: datetime | None
    paused_at: datetime | None
    version: int
    created_at: datetime
    updated_at: datetime
    # Read with the job (JobGet, JobList): its newest finished execution, and whether one is still
    # to run (ready or leased).
    last_outcome: ExecutionState | None = None
    last_finished_at: datetime | None = None
    has_open: bool = False
    # Why Kairos paused the job (pause_on_failure); NULL when the tenant paused it.
    paused_reason: str | None = None
    # The dead letter that last paused it (kept after a resume: the job's history marks it).
    pause_execution_id: UUID | None = None
    # Occurrences the schedule started while max_runs was set (app.scheduler.run_limits).
    run_count: int = 0
    # buffer_one: the nominal time of the occurrence waiting for the previous execution to settle.
    buffered_at: datetime | None = None

    @property
    def reported_state(self) -> ReportedJobState:
        return reported_job_state(self.state, self.has_open, self.last_outcome)


@dataclass(frozen=True)
class IdempotentHit:
    job_id: UUID
    request_hash: str
    first_run_at: datetime | None


@dataclass(frozen=True)
class ExecutionSummary:
    execution_id: UUID
    scheduled_for: datetime
    attempt: int
    state: ExecutionState
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    skip_reason: str | None
    trigger: str
    dispatched_at: datetime
    traceparent: str | None
    first_started_at: datetime | None


@dataclass(frozen=True)
class ExecutionCounts:
    succeeded: int
    dead: int
    cancelled: int
    skipped: int
    pending: int


def _payload_json(job: NewJob) -> str | None:
    """The inline payload as JSON text; SQL NULL when the object store keeps it."""
    if job.payload_ref is not None:
        return None
    return job.payload_json if job.payload_json is not None else compact_json(job.payload)


# The columns a NewJob fills, in the order of its fields; JobInsertMany binds each (an array named
# after its column), JobUpdate all but those a job keeps for life.
NEW_JOB_COLUMNS: tuple[str, ...] = tuple(f.name for f in msgspec.structs.fields(NewJob) if f.name != "payload_json")
UPDATE_KEEPS = frozenset({"job_id", "tenant_id", "idempotency_key", "request_hash", "traceparent"})
UPDATED_COLUMNS: tuple[str, ...] = tuple(c for c in NEW_JOB_COLUMNS if c not in UPDATE_KEEPS)
_NEW_JOB_TYPES = get_type_hints(NewJob)


def _is_dict(kind: Any) -> bool:
    return get_origin(kind) is dict or any(get_origin(k) is dict for k in get_args(kind))


# The JSONB columns besides the payload: the fields declared as dicts (or None), bound as their compact JSON
# text (None: SQL NULL).
JSON_COLUMNS = frozenset(c for c in NEW_JOB_COLUMNS if _is_dict(_NEW_JOB_TYPES[c]))


def _json_text(value: Any) -> str | None:
    return None if value is None else compact_json(value)


def _column_value(job: NewJob, column: str) -> Any:
    """``job``'s value of ``column`` as a statement binds it."""
    if column == "payload":
        return _payload_json(job)
    value = getattr(job, column)
    return _json_text(value) if column in JSON_COLUMNS else value


def _array_bind(column: str, kind: Any) -> Callable[[Sequence[NewJob]], str]:
    """How JobInsertMany binds ``column`` of many jobs: an array literal of text (quoted) or of values
    that print as they are (ids, instants, numbers, flags), by the field's declared type."""
    if column == "payload":
        return lambda jobs: texts([_payload_json(j) for j in jobs])
    get = attrgetter(column)
    if column in JSON_COLUMNS:
        return lambda jobs: texts(list(map(_json_text, map(get, jobs))))
    if str in (get_args(kind) or (kind,)):
        return lambda jobs: texts(list(map(get, jobs)))
    return lambda jobs: plain(list(map(get, jobs)))


_ARRAY_BINDS: dict[str, Callable[[Sequence[NewJob]], str]] = {
    column: _array_bind(column, _NEW_JOB_TYPES[column]) for column in NEW_JOB_COLUMNS if column != "tenant_id"
}


def _job(row: Row[Any]) -> Job:
    m = {k: v for k, v in row._mapping.items() if k != "reported_state"}  # JobList's filter column
    last = m.get("last_outcome")
    return Job(
        **{
            **m,
            "state": JobState(m["state"]),
            "last_outcome": ExecutionState(last) if last is not None else None,
            "has_open": bool(m.get("has_open")),
        }
    )


class Jobs(Table):
    """The jobs statements of one transaction."""

    async def insert_many(self, jobs: Sequence[NewJob]) -> set[UUID]:
        """Insert jobs and their due_index rows in one statement; the ids inserted (a job whose
        idempotency key is already taken, by an earlier request or earlier in ``jobs``, is not)."""
        if not jobs:
            return set()
        binds = {column: encode(jobs) for column, encode in _ARRAY_BINDS.items()}
        # A request's jobs are one tenant's: its id printed once, not once a job.
        tenant_text = {t: str(t) for t in {j.tenant_id for j in jobs}}
        binds["tenant_id"] = "{" + ",".join([tenant_text[j.tenant_id] for j in jobs]) + "}"
        binds["shard_id"] = plain([shard_of(j.job_id) for j in jobs])
        binds["due_minute"] = plain([due_minute(j.next_run_at) for j in jobs])
        rows = await self._conn.execute(q("JobInsertMany"), binds)
        # The statement answers with the ids it did NOT insert (almost always none): parsing a
        # thousand returned UUIDs was a sixth of the insert's CPU in the API.
        left_out = {r[0] for r in rows}
        return {j.job_id for j in jobs} - left_out

    async def insert_due(self, job_id: UUID, tenant_id: UUID, nominal_at: datetime, run_at: datetime) -> None:
        await self._conn.execute(
            q("DueIndexInsert"),
            {
                "shard_id": shard_of(job_id),
                "due_minute": due_minute(run_at),
                "next_run_at": run_at,
                "job_id": job_id,
                "tenant_id": tenant_id,
                "nominal_at": nominal_at,
            },
        )

    async def delete_due(self, job_id: UUID) -> bool:
        return (await self._conn.execute(q("DueIndexDeleteForJob"), {"job_id": job_id})).first() is not None

    async def by_idempotency_keys(self, keys: Sequence[tuple[UUID, str]]) -> dict[tuple[UUID, str], IdempotentHit]:
        """The jobs earlier requests created under these (tenant, key) pairs."""
        if not keys:
            return {}
        rows = await self._conn.execute(
            q("JobGetByIdempotencyKeyMany"),
            {"tenant_ids": plain([t for t, _ in keys]), "idempotency_keys": texts([k for _, k in keys])},
        )
        return {(r.tenant_id, r.idempotency_key): IdempotentHit(r.job_id, r.request_hash, r.first_run_at) for r in rows}

    async def get(self, tenant_id: UUID, job_id: UUID, *, for_update: bool = False) -> Job | None:
        stmt = q("JobGetForUpdate" if for_update else "JobGet")
        row = (await self._conn.execute(stmt, {"tenant_id": tenant_id, "job_id": job_id})).first()
        return _job(row) if row else None

    async def list_page(
        self,
        tenant_id: UUID,
        *,
        state: ReportedJobState | None,
        name: str | None,
        after: tuple[datetime, UUID] | None,
        limit: int,
        name_prefix: str | None = None,
        labels: dict[str, str] | None = None,
        selectors: Sequence[tuple[str, str, Sequence[str]]] = (),
    ) -> list[Job]:
        """``selectors``: (key, op, values) with op in, notin, exists or absent; every one must hold."""
        rows = await self._conn.execute(
            q("JobList"),
            {
                "tenant_id": tenant_id,
                "state": state,
                "name": name,
                "name_prefix": name_prefix,
                "labels": json.dumps(labels) if labels else None,
                "selectors": json.dumps([{"k": k, "op": op, "vs": list(vs)} for k, op, vs in selectors])
                if selectors
                else None,
                "after_created": after[0] if after else None,
                "after_id": after[1] if after else None,
                "limit": limit,
                # The page is cut before the reported state is known, so only when it is not filtered on.
                "scan_limit": limit if state is None else JOB_LIST_SCAN_ALL,
            },
        )
        return [_job(r) for r in rows]

    async def set_state(
        self, job: Job, to_state: JobState, *, next_nominal_at: datetime | None, next_run_at: datetime | None
    ) -> Job | None:
        row = (
            await self._conn.execute(
                q("JobSetState"),
                {
                    "tenant_id": job.tenant_id,
                    "job_id": job.job_id,
                    "from_state": job.state,
                    "version": job.version,
                    "updated_at": job.updated_at,
                    "to_state": to_state,
                    "next_nominal_at": next_nominal_at,
                    "next_run_at": next_run_at,
                },
            )
        ).first()
        return _job(row) if row else None

    async def executions_page(
        self, tenant_id: UUID, job_id: UUID, *, before: tuple[datetime, UUID] | None, limit: int
    ) -> list[ExecutionSummary]:
        rows = await self._conn.execute(
            q("ExecutionListForJob"),
            {
                "tenant_id": tenant_id,
                "job_id": job_id,
                "before_scheduled": before[0] if before else None,
                "limit": limit,
            },
        )
        return [ExecutionSummary(**{**r._mapping, "state": ExecutionState(r.state)}) for r in rows]

    async def update(self, job: Job, new: NewJob) -> Job | None:
        """Replace ``job``'s definition with ``new`` (same id and tenant); None when its version moved."""
        binds: dict[str, Any] = {column: _column_value(new, column) for column in UPDATED_COLUMNS}
        binds |= {
            "tenant_id": job.tenant_id,
            "job_id": job.job_id,
            "version": job.version,
            "updated_at": job.updated_at,
        }
        row = (await self._conn.execute(q("JobUpdate"), binds)).first()
        return _job(row) if row else None

    async def insert_executions(
        self,
        job: Job,
        scheduled_for: Sequence[datetime],
        ready_at: Sequence[datetime],
        *,
        trigger: str,
        dry_run: bool,
        traceparents: Sequence[str | None] | None = None,
    ) -> dict[datetime, UUID]:
        """Executions of ``job`` outside its schedule (a manual run, a backfill): nominal time -> new id;
        occurrences that already have an execution are absent. A dry-run job's are recorded as skipped."""
        if not scheduled_for:
            return {}
        await Partitions(self._conn).cover(scheduled_for)  # a backfill may reach a week with no partition
        rows = await self._conn.execute(
            q("ExecutionInsertForJob"),
            {
                "job_id": job.job_id,
                "tenant_id": job.tenant_id,
                "queue": job.queue,
                "max_attempts": job.max_attempts,
                "state": ExecutionState.SKIPPED if dry_run else ExecutionState.READY,
                "skip_reason": "dry_run" if dry_run else None,
                "note": "dry run: recorded, not delivered" if dry_run else None,
                "trigger": trigger,
                "scheduled_fors": plain(scheduled_for),
                "ready_ats": plain(ready_at),
                "traceparents": texts(traceparents if traceparents is not None else [None] * len(scheduled_for)),
            },
        )
        return {r.scheduled_for: r.execution_id for r in rows}

    async def due_per_minute(
        self, pairs: Sequence[tuple[UUID, datetime]], at_most: int
    ) -> dict[tuple[UUID, datetime], int]:
        """(tenant, due minute) -> occurrences of that tenant due in that minute, counted up to ``at_most``."""
        if not pairs:
            return {}
        rows = await self._conn.execute(
            q("DueIndexTenantMinuteCountMany"),
            {
                "shard_ids": plain(range(SHARD_COUNT)),
                "tenant_ids": plain([t for t, _ in pairs]),
                "due_minutes": plain([m for _, m in pairs]),
                "at_most": at_most,
            },
        )
        return {(r.tenant_id, r.due_minute): int(r.due) for r in rows}

    async def execution_counts(self, tenant_id: UUID, job_id: UUID, newest: int | None = None) -> ExecutionCounts:
        """How the job's executions stand, by state (ready and leased count as pending): all of them, or
        its ``newest`` only (a bounded read, whatever history the job has kept)."""
        if newest is None:
            rows = await self._conn.execute(q("ExecutionCountsForJob"), {"tenant_id": tenant_id, "job_id": job_id})
        else:
            rows = await self._conn.execute(
                q("ExecutionCountsForJobNewest"), {"tenant_id": tenant_id, "job_id": job_id, "newest": newest}
            )
        by = {r.state: int(r.n) for r in rows}
        return ExecutionCounts(
            succeeded=by.get("succeeded", 0),
            dead=by.get("dead", 0),
            cancelled=by.get("cancelled", 0),
            skipped=by.get("skipped", 0),
            pending=by.get("ready", 0) + by.get("leased", 0),
        )

    async def cancel_unstarted(self, tenant_id: UUID, job_id: UUID) -> int:
        rows = (
            await self._conn.execute(q("ExecutionCancelUnstartedForJob"), {"tenant_id": tenant_id, "job_id": job_id})
        ).all()
        return len(rows)

    async def withdraw_ahead(self, tenant_id: UUID, job_id: UUID, now: datetime | None = None) -> list[datetime]:
        """Delete the job's executions dispatched ahead and not yet due (never leased); their nominal times."""
        rows = await self._conn.execute(
            q("ExecutionWithdrawAheadForJob"), {"tenant_id": tenant_id, "job_id": job_id, "now": now}
        )
        return [r.scheduled_for for r in rows]

    async def add_runs(self, job_id: UUID, runs: int) -> None:
        """Move a run-limited job's count of started occurrences by ``runs`` (negative: withdrawn unstarted)."""
        await self._conn.execute(q("JobAddRunsMany"), {"job_ids": plain([job_id]), "runs": plain([runs])})

    async def shared_pool_access_many(self, pairs: Sequence[tuple[UUID, str]]) -> dict[tuple[UUID, str], bool]:
        """For (tenant, pool) pairs naming a shared pool: whether the tenant is granted it (others absent)."""
        if not pairs:
            return {}
        rows = await self._conn.execute(
            q("PoolLookupForTenantMany"),
            {"tenant_ids": plain([t for t, _ in pairs]), "names": texts([p for _, p in pairs])},
        )
        return {(r.tenant_id, r.name): bool(r.granted) for r in rows}

    async def record_skipped(
        self, job_id: UUID, tenant_id: UUID, queue: str, max_attempts: int, scheduled_for: list[datetime], reason: str
    ) -> None:
        """Record occurrences that will not run, so the job's history says why."""
        await Partitions(self._conn).cover(scheduled_for)  # misfires may reach back past the partitions kept
        await self._conn.execute(
            q("JobRecordSkippedOccurrences"),
            {
                "job_id": job_id,
                "tenant_id": tenant_id,
                "queue": queue,
                "scheduled_fors": scheduled_for,
                "max_attempts": max_attempts,
                "reason": reason,
            },
        )
