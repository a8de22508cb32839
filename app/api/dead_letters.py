"""/v1/dead-letters and /v1/executions/{executionId}:replay (the execution tier's REST routes).

A dead letter is an execution in state ``dead``: attempts exhausted or a non-retryable error.
Replaying one makes it ready again with a fresh attempt budget (the attempt number, being the
fencing token, keeps counting up), optionally with an edited payload and retry policy. Bulk
replay is budgeted per tenant in the database (``replay_budgets``), so every API replica
shares one limit.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

import msgspec
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import State
from litestar.params import FromPath, FromQuery, QueryParameter

from app import errors
from app.api.auth import DB, Tenant
from app.api.schemas import Wire, decode_body
from app.api.service import decode_cursor, encode_cursor, next_link, page_limit
from app.domain.jobs import MAX_ATTEMPTS, MAX_BACKOFF_S, validate_payload
from app.store import attempts as attempts_store
from app.store import executions as store

# Bulk replay budget per tenant: at most this many executions per window.
REPLAY_PER_WINDOW = 1000
REPLAY_WINDOW_S = 60.0
BULK_REPLAY_MAX = 1000



class RetryOverride(Wire):
    max_attempts: int | None = None
    backoff_seconds: float | None = None
    max_backoff_seconds: float | None = None


class ReplayIn(Wire):
    payload: Any = msgspec.UNSET
    retry: RetryOverride | None = None


class BulkReplayIn(Wire):
    job_id: str | None = None
    finished_after: datetime | None = None
    finished_before: datetime | None = None
    limit: int = 100


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
    attempt: int
    max_attempts: int
    ready_at: datetime


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
    outcome: str
    error: str | None
    result: Any


def _uuid(value: str | None, field: str) -> UUID | None:
    if value is None:
        return None
    try:
        return UUID(value)
    except ValueError:
        raise errors.InvalidInput(field, "is not a UUID") from None


def _execution_ref(ref: str, *, action: str | None) -> UUID:
    """``{executionId}`` or ``{executionId}:{action}`` (custom method, as /v1/jobs does)."""
    ident, sep, verb = ref.partition(":")
    if action is not None and (not sep or verb != action):
        raise errors.InvalidInput("path", f"POST /v1/executions/{{executionId}}:<action> takes {action}")
    if action is None and sep:
        raise errors.ExecutionNotFound()
    try:
        return UUID(ident)
    except ValueError:
        raise errors.ExecutionNotFound() from None


def _validate_retry(retry: RetryOverride | None) -> RetryOverride:
    retry = retry or RetryOverride()
    if retry.max_attempts is not None and not 1 <= retry.max_attempts <= MAX_ATTEMPTS:
        raise errors.InvalidInput("retry.maxAttempts", f"must be between 1 and {MAX_ATTEMPTS}")
    if retry.backoff_seconds is not None and not 0 <= retry.backoff_seconds <= MAX_BACKOFF_S:
        raise errors.InvalidInput("retry.backoffSeconds", f"must be between 0 and {MAX_BACKOFF_S}")
    if retry.max_backoff_seconds is not None and not 0 <= retry.max_backoff_seconds <= MAX_BACKOFF_S:
        raise errors.InvalidInput("retry.maxBackoffSeconds", f"must be between 0 and {MAX_BACKOFF_S}")
    if (retry.backoff_seconds is not None and retry.max_backoff_seconds is not None
            and retry.max_backoff_seconds < retry.backoff_seconds):
        raise errors.InvalidInput("retry.maxBackoffSeconds", "must be at least backoffSeconds")
    return retry


class DeadLetterController(Controller):
    path = "/v1"
    tags = ["dead letters"]

    @get("/dead-letters", operation_id="ListDeadLetters",
         summary="A tenant's dead executions with their last error, newest first; next page in the Link header.")
    async def list_dead(self, db: DB, tenant: Tenant, cursor: FromQuery[str | None] = None,
                        limit: FromQuery[int | None] = None,
                        job_id: Annotated[str | None, QueryParameter(name="jobId")] = None) -> Response[list[DeadLetterOut]]:
        n = page_limit(limit)
        before = decode_cursor(cursor)
        job = _uuid(job_id, "jobId")
        rows = await db.transaction(lambda c: store.list_dead(c, tenant.tenant_id, job_id=job, before=before,
                                                              limit=n + 1))
        more, rows = len(rows) > n, rows[:n]
        headers = None
        if more:
            cursor = encode_cursor(rows[-1].finished_at, rows[-1].execution_id)
            headers = {"Link": next_link("/v1/dead-letters", cursor, limit=limit, jobId=job_id)}
        return Response([
            DeadLetterOut(str(d.execution_id), str(d.job_id), d.scheduled_for, d.attempt, d.max_attempts,
                          d.finished_at, d.error)
            for d in rows
        ], headers=headers)

    @post("/dead-letters:replay", operation_id="ReplayDeadLetters", status_code=200,
          summary="Replay up to `limit` dead executions matching a filter (jobId, finished window); budgeted per tenant.")
    async def replay_many(self, request: Request, db: DB, tenant: Tenant) -> BulkReplayedOut:
        body: BulkReplayIn = decode_body(await request.body(), BulkReplayIn)
        if not 1 <= body.limit <= BULK_REPLAY_MAX:
            raise errors.InvalidInput("limit", f"must be between 1 and {BULK_REPLAY_MAX}")
        job = _uuid(body.job_id, "jobId")

        async def work(conn) -> BulkReplayedOut:
            budget = await attempts_store.replay_budget(conn, tenant.tenant_id, per_window=REPLAY_PER_WINDOW,
                                                        window_s=REPLAY_WINDOW_S)
            if budget.left == 0:
                raise errors.TenantQuotaExceeded(
                    f"the bulk replay budget of {REPLAY_PER_WINDOW} per {REPLAY_WINDOW_S:g}s is spent; "
                    f"it resets at {budget.resets_at.isoformat()}")
            ids = await store.replay_dead_many(conn, tenant.tenant_id, limit=min(body.limit, budget.left),
                                               job_id=job, finished_after=body.finished_after,
                                               finished_before=body.finished_before)
            budget = await attempts_store.spend_replay_budget(conn, tenant.tenant_id, budget, len(ids))
            return BulkReplayedOut(len(ids), [str(i) for i in ids], budget.left, budget.resets_at)

        return await db.transaction(work)

    @post("/executions/{execution_ref:str}", operation_id="ReplayExecution", status_code=200,
          summary="POST /v1/executions/{executionId}:replay: make a dead execution ready again "
                  "(fresh attempt budget; optional body {payload, retry})")
    async def replay(self, request: Request, execution_ref: FromPath[str], db: DB, tenant: Tenant,
                     state: State) -> ReplayedOut:
        execution_id = _execution_ref(execution_ref, action="replay")
        body: ReplayIn = decode_body(await request.body(), ReplayIn)
        retry = _validate_retry(body.retry)
        payload = None
        if body.payload is not msgspec.UNSET:
            payload = validate_payload(body.payload, state.settings.max_payload_bytes)

        async def work(conn) -> store.Replayed:
            done = await store.replay(conn, tenant.tenant_id, execution_id, payload=payload,
                                      max_attempts=retry.max_attempts, backoff_s=retry.backoff_seconds,
                                      max_backoff_s=retry.max_backoff_seconds)
            if done is None:
                current = await store.get(conn, tenant.tenant_id, execution_id)
                if current is None:
                    raise errors.ExecutionNotFound()
                raise errors.InvalidStateTransition(
                    f"only a dead execution can be replayed; this one is {current.state}")
            return done

        done = await db.transaction(work)
        return ReplayedOut(str(done.execution_id), str(done.job_id), "ready", done.attempt, done.max_attempts,
                           done.ready_at)

    @get("/executions/{execution_ref:str}/attempts", operation_id="ListExecutionAttempts",
         summary="Every attempt of an execution, oldest first, including late results discarded after LEASE_LOST.")
    async def attempts(self, execution_ref: FromPath[str], db: DB, tenant: Tenant) -> list[AttemptOut]:
        execution_id = _execution_ref(execution_ref, action=None)

        async def work(conn):
            if await store.get(conn, tenant.tenant_id, execution_id) is None:
                raise errors.ExecutionNotFound()
            return await attempts_store.list_for_execution(conn, tenant.tenant_id, execution_id)

        return [AttemptOut(a.attempt, a.worker_id, a.leased_at, a.lease_until, a.finished_at, a.outcome, a.error,
                           a.result) for a in await db.transaction(work)]
