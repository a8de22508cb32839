"""Executions: the execution tier's side (lease, heartbeat, complete, fail, reap, replay).

Every state change is a guarded UPDATE: ``WHERE state = 'leased' AND attempt = :attempt``. The
attempt number is the fencing token, so a call carrying a stale attempt changes nothing, and
correctness never depends on ``FOR UPDATE SKIP LOCKED`` (which only keeps concurrent leasers
from queueing behind each other). Hot paths (lease, complete, fail, reap) are one statement
over arrays, whatever the batch size.
"""

from __future__ import annotations

import random
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any
from uuid import UUID

from app.domain.backoff import retry_delay_s
from app.domain.jsontext import compact_json
from app.domain.states import ExecutionState
from app.store.arrays import plain, texts
from app.store.queries import q
from app.store.table import Table

# An execution's id as the executor's callers hold it: a UUID, or its canonical text (lower case, with
# hyphens), which is what the lease answers and the worker calls carry. The batch statements answer
# each id keyed by the very object the caller passed, whichever form it is.
ExecutionRef = UUID | str


@dataclass(slots=True)  # not frozen: a frozen dataclass's __init__ cost 1.3 us a leased row, this one 0.14 us
class Leased:
    # The ids as text: they are handed on as text (gRPC, HTTP headers, log lines), and a UUID loaded,
    # formatted and hashed cost the executor about 1 us a step (docs/performance.md, "Lease").
    execution_id: str
    job_id: str
    tenant_id: str
    attempt: int
    max_attempts: int
    scheduled_for: datetime
    lease_until: datetime
    payload: Any  # a JSON value; msgspec.Raw, its JSON text, once read from the object store (app.executor.payloads)
    target_type: str
    target_ref: str
    timeout_s: int
    signing_secret: str
    http_method: str = "POST"
    http_headers: dict[str, str] | None = None
    traceparent: str | None = None  # the occurrence's trace (app.observability.tracing)
    payload_ref: str | None = None  # the payload is in the object store (app.store.payloads.PayloadStore.resolve)
    trigger: str = "schedule"  # schedule, manual or backfill: start lag counts scheduled occurrences only
    http_auth: dict[str, Any] | None = None  # the target's auth object ({"type": "oidc", ...}); None: none
    oidc_key_id: str | None = None  # the key that signs its identity token: its id (the token's kid)
    oidc_key: str | None = None  # and its sealed private half (app.store.oidc_keys)

    @property
    def idempotency_key(self) -> str:
        """The same for every attempt of one occurrence: receivers deduplicate on it."""
        return f"{self.job_id}:{idempotency_time(self.scheduled_for)}"


def _times(values: Sequence[datetime | None] | None, n: int) -> str:
    """The occurrence times of a batch as an array literal (all NULL when the caller knows none)."""
    return plain([None] * n if values is None else values)


def idempotency_time(scheduled_for: datetime) -> str:
    """An occurrence's time as its idempotency key writes it (ISO 8601, Z for UTC)."""
    return scheduled_for.isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class AttemptRef:
    execution_id: ExecutionRef
    attempt: int


@dataclass(frozen=True)
class Renewal:
    """A lease to renew; ``restart`` also restarts its attempt's clock (a delivery that has not started)."""

    execution_id: ExecutionRef
    attempt: int
    restart: bool = False
    scheduled_for: datetime | None = None  # its occurrence time, when known: the row's own weekly partition


@dataclass(slots=True)  # one per completed execution (CompleteMany): not frozen, a quarter of the __init__ cost
class Success:
    execution_id: ExecutionRef
    attempt: int
    result: Any = None
    # Which executions the caller may touch: an exact queue ('shared:fleet'), a queue prefix
    # ending in ':' ('tenant:<id>:'), or None (the executor itself). Others answer lease lost.
    scope: str | None = None
    sent_at: datetime | None = None  # when an HTTP delivery's request left (attempts.sent_at)


@dataclass(frozen=True)
class Failure:
    execution_id: ExecutionRef
    attempt: int
    error: str
    retryable: bool = True
    scope: str | None = None
    sent_at: datetime | None = None  # when an HTTP delivery's request left (attempts.sent_at)
    retry_after_s: float | None = None  # the target's Retry-After: the retry waits at least this long


@dataclass(frozen=True)
class FailOutcome:
    execution_id: ExecutionRef
    state: ExecutionState | None  # READY (retry at retry_at), DEAD, or None: the attempt was stale
    retry_at: datetime | None


@dataclass(frozen=True)
class DeadLetter:
    execution_id: UUID
    job_id: UUID
    queue: str
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    finished_at: datetime
    error: str | None


@dataclass(frozen=True)
class Replayed:
    execution_id: UUID
    job_id: UUID
    attempt: int
    max_attempts: int
    ready_at: datetime


@dataclass(frozen=True)
class Execution:
    execution_id: UUID
    job_id: UUID
    tenant_id: UUID
    queue: str
    scheduled_for: datetime
    attempt: int
    max_attempts: int
    state: ExecutionState
    ready_at: datetime
    lease_owner: str | None
    lease_until: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    error: str | None
    result: Any


MAX_ERROR_CHARS = 4000
# ExecutionLeaseFair selects exactly these columns in this order: rows build Leased positionally
# (keyword construction from each row's mapping was a visible share of the Lease RPC's CPU).
_LEASED_COLUMNS = tuple(f.name for f in fields(Leased))


def _json(value: Any) -> str | None:
    return None if value is None else compact_json(value)


def _by_text(ids: Sequence[ExecutionRef]) -> dict[str, ExecutionRef]:
    """The caller's ids by their text: a statement's answer (ids as text or UUIDs) keyed by the caller's own objects."""
    return {i if type(i) is str else str(i): i for i in ids}


class Executions(Table):
    """The executions statements of one transaction."""

    async def lease(
        self,
        queue: str,
        worker_id: str,
        limit: int,
        lease_s: float,
        *,
        skip_tenants: Sequence[UUID | str] = (),
        now: datetime | None = None,
    ) -> list[Leased]:
        """Lease up to ``limit`` ready executions of ``queue``, fairly across tenants, none of ``skip_tenants``'s
        (the HTTP pool's tenants whose deliveries already wait in it)."""
        rows = await self._conn.execute(
            q("ExecutionLeaseFair"),
            {
                "queue": queue,
                "worker_id": worker_id,
                "limit": limit,
                "lease_s": lease_s,
                "now": now,
                "salt": secrets.token_hex(4),
                "skip_tenants": plain(list(skip_tenants)),
            },
        )
        if tuple(rows.keys()) != _LEASED_COLUMNS:
            raise RuntimeError(f"ExecutionLeaseFair returns {tuple(rows.keys())}, Leased expects {_LEASED_COLUMNS}")
        return [Leased(*r) for r in rows]

    async def renew_many(
        self, held: Sequence[Renewal], worker_id: str, lease_s: float, *, now: datetime | None = None
    ) -> dict[ExecutionRef, datetime]:
        """execution_id -> new lease_until of each renewed lease; one not held by ``worker_id`` at that
        attempt (or past its timeout, unless restarted) is missing."""
        if not held:
            return {}
        rows = await self._conn.execute(
            q("ExecutionLeaseRenewMany"),
            {
                "execution_ids": plain([h.execution_id for h in held]),
                "attempts": plain([h.attempt for h in held]),
                "restarts": plain([h.restart for h in held]),
                "scheduled_fors": _times([h.scheduled_for for h in held], len(held)),
                "worker_id": worker_id,
                "lease_s": lease_s,
                "now": now,
            },
        )
        given = _by_text([h.execution_id for h in held])
        return {given[str(execution_id)]: lease_until for execution_id, lease_until in rows}

    async def next_ready_in(self, queue: str, *, now: datetime | None = None) -> float | None:
        """Seconds until the queue's earliest ready execution falls due (<= 0: now); None when none is ready."""
        rows = await self._conn.execute(q("ExecutionNextReadyIn"), {"queue": queue, "now": now})
        seconds: float | None = rows.scalar_one()
        return seconds

    async def heartbeat(
        self,
        execution_id: ExecutionRef,
        attempt: int,
        lease_s: float,
        *,
        scope: str | None = None,
        scheduled_for: datetime | None = None,
        now: datetime | None = None,
    ) -> datetime | None:
        """The new lease_until, or None when the attempt is not current (or timed out, or out of scope).
        ``scheduled_for``: the execution's occurrence time when the caller knows it (its own partition)."""
        row = (
            await self._conn.execute(
                q("ExecutionHeartbeat"),
                {
                    "execution_id": execution_id,
                    "attempt": attempt,
                    "lease_s": lease_s,
                    "now": now,
                    "scope": scope,
                    "scheduled_for": scheduled_for,
                },
            )
        ).first()
        return row.lease_until if row else None

    async def complete_many(
        self,
        done: Sequence[Success],
        *,
        scheduled_fors: Sequence[datetime | None] | None = None,
        now: datetime | None = None,
    ) -> dict[ExecutionRef, bool]:
        """execution_id -> True (recorded, or already recorded by this attempt) / False (lease lost).

        Executions outside a caller's scope (or unknown) are missing from the answer: lease lost too.
        ``scheduled_fors`` (aligned with ``done``, None where unknown): each execution's occurrence time,
        which the lease answered; with it the row is found in its own weekly partition of history.
        """
        if not done:
            return {}
        ids = [d.execution_id for d in done]
        rows = await self._conn.execute(
            q("ExecutionCompleteMany"),
            {
                "execution_ids": plain(ids),
                "attempts": plain([d.attempt for d in done]),
                "results": texts([_json(d.result) for d in done]),
                "scopes": texts([d.scope for d in done]),
                "now": now,
                "sent_ats": plain([d.sent_at for d in done]),
                "scheduled_fors": _times(scheduled_fors, len(done)),
            },
        )
        given = _by_text(ids)  # the statement answers the ids as text
        return {given[execution_id]: bool(ok) for execution_id, ok in rows}

    async def fail_many(
        self,
        failed: Sequence[Failure],
        *,
        scheduled_fors: Sequence[datetime | None] | None = None,
        now: datetime | None = None,
        rng: random.Random | None = None,
    ) -> dict[ExecutionRef, FailOutcome]:
        """Schedule retries (backoff from app.domain.backoff) or dead-letter; stale attempts change nothing
        (their outcome's state is None, as for executions out of the caller's scope or unknown).
        ``scheduled_fors`` as for :meth:`complete_many`."""
        if not failed:
            return {}
        ids = [f.execution_id for f in failed]
        given = _by_text(ids)
        policies = {
            given[str(r.execution_id)]: r
            for r in await self._conn.execute(q("ExecutionRetryPolicyMany"), {"execution_ids": plain(ids), "now": now})
        }
        delays, retryable, messages = [], [], []
        for f in failed:
            p = policies.get(f.execution_id)
            delay = retry_delay_s(max(f.attempt, 1), p.backoff_s, p.max_backoff_s, rng=rng) if p else 0.0
            if f.retry_after_s is not None:  # the target said when to come back: never sooner
                delay = max(delay, f.retry_after_s)
            delays.append(delay)
            # maxRetryDurationSeconds (Cloud Scheduler's): no retry starts after the deadline, counted
            # from the first attempt, whatever attempts are left.
            past_deadline = (
                p is not None
                and p.max_retry_duration_s is not None
                and p.retrying_for_s is not None
                and float(p.retrying_for_s) + delay > p.max_retry_duration_s
            )
            retryable.append(f.retryable and not past_deadline)
            note = " (retry deadline maxRetryDurationSeconds passed)" if past_deadline and f.retryable else ""
            messages.append(f.error[-(MAX_ERROR_CHARS - len(note)) :] + note)
        rows = await self._conn.execute(
            q("ExecutionFailMany"),
            {
                "execution_ids": plain(ids),
                "attempts": plain([f.attempt for f in failed]),
                "errors": texts(messages),
                "retryable": plain(retryable),
                "delays_s": plain(delays),
                "scopes": texts([f.scope for f in failed]),
                "now": now,
                "sent_ats": plain([f.sent_at for f in failed]),
                "scheduled_fors": _times(scheduled_fors, len(failed)),
            },
        )
        # The statement answers the failed ones; every other (stale, out of scope, unknown) changed nothing.
        out = {execution_id: FailOutcome(execution_id, None, None) for execution_id in ids}
        dead: list[ExecutionRef] = []
        for execution_id, state, ready_at in rows:
            if state is None:  # CockroachDB's text answers the stale ones too, without a state
                continue
            mine = given[str(execution_id)]
            out[mine] = FailOutcome(mine, ExecutionState(state), ready_at if state == ExecutionState.READY else None)
            if state == ExecutionState.DEAD:
                dead.append(mine)
        await self.pause_on_failure(dead, now=now)
        return out

    async def pause_on_failure(self, dead: Sequence[ExecutionRef], *, now: datetime | None = None) -> list[UUID]:
        """Pause the pauseOnFailure jobs of these dead-lettered scheduled occurrences (one statement, only
        when something died): the ids of the jobs paused."""
        if not dead:
            return []
        rows = await self._conn.execute(q("JobPauseOnFailureMany"), {"execution_ids": plain(dead), "now": now})
        return [r.job_id for r in rows]

    async def defer_many(
        self, held: Sequence[AttemptRef], delays_s: Sequence[float], *, now: datetime | None = None
    ) -> int:
        """Give leased executions back unrun for ``delays_s`` without spending an attempt."""
        if not held:
            return 0
        rows = (
            await self._conn.execute(
                q("ExecutionDeferMany"),
                {
                    "execution_ids": plain([h.execution_id for h in held]),
                    "attempts": plain([h.attempt for h in held]),
                    "delays_s": plain(delays_s),
                    "now": now,
                },
            )
        ).all()
        return len(rows)

    async def reap_expired(self, limit: int, *, now: datetime | None = None) -> dict[ExecutionState, int]:
        """{READY: n, DEAD: m}: expired leases returned to the queue or dead-lettered."""
        rows = await self._conn.execute(q("ExecutionReapExpired"), {"limit": limit, "now": now})
        out = {ExecutionState.READY: 0, ExecutionState.DEAD: 0}
        for r in rows:
            out[ExecutionState(r.state)] = int(r.n)
        if out[ExecutionState.DEAD]:
            # The reap answers counts: its dead letters are the ones finished at its clock (this transaction's).
            found = await self._conn.execute(q("ExecutionDeadFinishedAt"), {"finished_at": now})
            await self.pause_on_failure([r.execution_id for r in found], now=now)
        return out

    async def replay(
        self,
        tenant_id: UUID,
        execution_id: UUID,
        *,
        payload: Any = None,
        max_attempts: int | None = None,
        backoff_s: float | None = None,
        max_backoff_s: float | None = None,
        now: datetime | None = None,
    ) -> Replayed | None:
        """None when the tenant has no dead execution of that id."""
        row = (
            await self._conn.execute(
                q("ExecutionReplay"),
                {
                    "tenant_id": tenant_id,
                    "execution_id": execution_id,
                    "payload": _json(payload),
                    "max_attempts": max_attempts,
                    "backoff_s": backoff_s,
                    "max_backoff_s": max_backoff_s,
                    "now": now,
                },
            )
        ).first()
        return Replayed(**row._mapping) if row else None

    async def replay_dead_many(
        self,
        tenant_id: UUID,
        *,
        limit: int,
        job_id: UUID | None = None,
        finished_after: datetime | None = None,
        finished_before: datetime | None = None,
        now: datetime | None = None,
    ) -> list[UUID]:
        rows = await self._conn.execute(
            q("ExecutionReplayDeadMany"),
            {
                "tenant_id": tenant_id,
                "limit": limit,
                "job_id": job_id,
                "finished_after": finished_after,
                "finished_before": finished_before,
                "now": now,
            },
        )
        return [r.execution_id for r in rows]

    async def list_dead(
        self, tenant_id: UUID, *, job_id: UUID | None, before: tuple[datetime, UUID] | None, limit: int
    ) -> list[DeadLetter]:
        rows = await self._conn.execute(
            q("ExecutionListDead"),
            {
                "tenant_id": tenant_id,
                "job_id": job_id,
                "before_finished": before[0] if before else None,
                "before_id": before[1] if before else None,
                "limit": limit,
            },
        )
        return [DeadLetter(**r._mapping) for r in rows]

    async def get(self, tenant_id: UUID, execution_id: UUID) -> Execution | None:
        row = (
            await self._conn.execute(q("ExecutionGetForTenant"), {"tenant_id": tenant_id, "execution_id": execution_id})
        ).first()
        if row is None:
            return None
        m = row._mapping
        return Execution(**{**m, "state": ExecutionState(m["state"])})

    async def count_ready_by_queue(self, *, now: datetime | None = None) -> dict[str, int]:
        """Executions due and waiting for a worker, per queue; a queue with none is absent."""
        rows = await self._conn.execute(q("ExecutionCountReadyByQueue"), {"now": now})
        return {str(r.queue): int(r.ready) for r in rows}
