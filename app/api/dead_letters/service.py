"""What the dead-letter endpoints do, one transaction each, scoped to one tenant.

A dead letter is an execution in state ``dead``: attempts exhausted or a non-retryable error.
Replaying one makes it ready again with a fresh attempt budget, optionally with an edited payload
and retry policy. The budget is counted from the replay: ``retry.maxAttempts: 3`` means three more
attempts (the job's maxAttempts when left out), and the answer reports those three. The attempt
number, being the fencing token, keeps counting up, so the stored ceiling is the attempt reached so
far plus the budget (``ExecutionReplay``), reported as ``lastAttempt``. Bulk
replay is budgeted per tenant in the database (``replay_budgets``), so every API replica
shares one limit.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any
from uuid import UUID

import msgspec

from app import errors
from app.api.dead_letters import schemas
from app.api.jobs.schemas import AttemptOut
from app.api.pagination import decode_cursor, page_limit, split_page
from app.domain.jobs import MAX_ATTEMPTS, MAX_BACKOFF_S, validate_payload
from app.domain.states import ExecutionState
from app.store import Database, Store
from app.store import attempts as attempts_store
from app.store import executions as executions_store

BULK_REPLAY_MAX = schemas.BULK_REPLAY_MAX


def parse_uuid(value: str | None, field: str, *, parameter: bool = False) -> UUID | None:
    """``value`` as a UUID; refused as the body field or (``parameter``) the query parameter ``field``."""
    if value is None:
        return None
    try:
        return UUID(value)
    except ValueError:
        invalid = errors.InvalidParameter if parameter else errors.InvalidInput
        raise invalid(field, "is not a UUID") from None


def validate_retry(retry: schemas.RetryOverride | None) -> schemas.RetryOverride:
    retry = retry or schemas.RetryOverride()
    if retry.max_attempts is not None and not 1 <= retry.max_attempts <= MAX_ATTEMPTS:
        raise errors.InvalidInput("retry.maxAttempts", f"must be between 1 and {MAX_ATTEMPTS}")
    if retry.backoff_seconds is not None and not 0 <= retry.backoff_seconds <= MAX_BACKOFF_S:
        raise errors.InvalidInput("retry.backoffSeconds", f"must be between 0 and {MAX_BACKOFF_S}")
    if retry.max_backoff_seconds is not None and not 0 <= retry.max_backoff_seconds <= MAX_BACKOFF_S:
        raise errors.InvalidInput("retry.maxBackoffSeconds", f"must be between 0 and {MAX_BACKOFF_S}")
    if (
        retry.backoff_seconds is not None
        and retry.max_backoff_seconds is not None
        and retry.max_backoff_seconds < retry.backoff_seconds
    ):
        raise errors.InvalidInput("retry.maxBackoffSeconds", "must be at least backoffSeconds")
    return retry


async def list_dead(
    db: Database, tenant_id: UUID, *, job_id: str | None, cursor: str | None, limit: int | None
) -> tuple[list[executions_store.DeadLetter], str | None]:
    """A page of dead letters, newest first, and the cursor of the next page."""
    n = page_limit(limit)
    before = decode_cursor(cursor)
    job = parse_uuid(job_id, "jobId", parameter=True)
    rows = await db.read(lambda tx: tx.executions.list_dead(tenant_id, job_id=job, before=before, limit=n + 1))
    return split_page(rows, n, lambda d: (d.finished_at, d.execution_id))


async def replay_many(
    db: Database, tenant_id: UUID, body: schemas.BulkReplayIn, *, per_window: int, window_s: float
) -> schemas.BulkReplayedOut:
    """Replay what the filter matches, up to what is left of the tenant's budget of ``per_window``
    executions per ``window_s``; a spent budget is TenantQuotaExceeded."""
    if not 1 <= body.limit <= BULK_REPLAY_MAX:
        raise errors.InvalidInput("limit", f"must be between 1 and {BULK_REPLAY_MAX}")
    job = parse_uuid(body.job_id, "jobId")

    async def work(tx: Store) -> schemas.BulkReplayedOut:
        budget = await tx.attempts.replay_budget(tenant_id, per_window=per_window, window_s=window_s)
        if budget.left == 0:
            wait_s = (budget.resets_at - datetime.now(timezone.utc)).total_seconds()
            raise errors.TenantQuotaExceeded(
                f"the bulk replay budget of {per_window} per {window_s:g}s is spent; "
                f"it resets at {budget.resets_at.isoformat()}",
                quota="bulkReplayPerWindow",
                limit=per_window,
                retry_after_s=max(1, math.ceil(wait_s)),
            )
        ids = await tx.executions.replay_dead_many(
            tenant_id,
            limit=min(body.limit, budget.left),
            job_id=job,
            finished_after=body.finished_after,
            finished_before=body.finished_before,
        )
        budget = await tx.attempts.spend_replay_budget(tenant_id, budget, len(ids))
        return schemas.BulkReplayedOut(len(ids), [str(i) for i in ids], budget.left, budget.resets_at)

    return await db.transaction(work)


async def replay(
    db: Database, tenant_id: UUID, execution_id: UUID, body: schemas.ReplayIn, max_payload_bytes: int
) -> executions_store.Replayed:
    retry = validate_retry(body.retry)
    payload: Any = None
    if body.payload is not msgspec.UNSET:
        payload = validate_payload(body.payload, max_payload_bytes)

    async def work(tx: Store) -> executions_store.Replayed:
        done = await tx.executions.replay(
            tenant_id,
            execution_id,
            payload=payload,
            max_attempts=retry.max_attempts,
            backoff_s=retry.backoff_seconds,
            max_backoff_s=retry.max_backoff_seconds,
        )
        if done is None:
            current = await tx.executions.get(tenant_id, execution_id)
            if current is None:
                raise errors.ExecutionNotFound()
            raise errors.InvalidExecutionState(f"only a dead execution can be replayed; this one is {current.state}")
        return done

    return await db.transaction(work)


async def attempts(db: Database, tenant_id: UUID, execution_id: UUID) -> list[attempts_store.Attempt]:
    async def work(tx: Store) -> list[attempts_store.Attempt]:
        if await tx.executions.get(tenant_id, execution_id) is None:
            raise errors.ExecutionNotFound()
        return await tx.attempts.list_for_execution(tenant_id, execution_id)

    return await db.read(work, fresh_if=(errors.ExecutionNotFound,))  # the read replica, if any


def dead_letter_out(d: executions_store.DeadLetter) -> schemas.DeadLetterOut:
    return schemas.DeadLetterOut(
        str(d.execution_id), str(d.job_id), d.scheduled_for, d.attempt, d.max_attempts, d.finished_at, d.error
    )


def replayed_out(done: executions_store.Replayed) -> schemas.ReplayedOut:
    """The replay in the terms it was asked in: the attempts it grants, and where they end (the stored
    ``max_attempts`` is that absolute ceiling, since the attempt counter never goes back)."""
    return schemas.ReplayedOut(
        str(done.execution_id),
        str(done.job_id),
        ExecutionState.READY,
        done.attempt,
        done.max_attempts - done.attempt,
        done.ready_at,
        last_attempt=done.max_attempts,
    )


def attempt_out(a: attempts_store.Attempt) -> AttemptOut:
    return AttemptOut(
        a.attempt, a.worker_id, a.leased_at, a.lease_until, a.finished_at, a.outcome.value, a.error, a.result, a.sent_at
    )
