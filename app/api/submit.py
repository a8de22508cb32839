"""Submitting jobs: single and batched, through one group-committing writer per API process.

Every submit (``POST /v1/jobs`` and each valid item of ``POST /v1/jobs:batch``) is validated on
its own, then handed to the process's ``SubmitWriter``. The writer commits what is waiting in one
transaction with one statement over arrays (``JobInsertMany``); submits that arrive while
transactions are in flight wait for the next one, so under load a transaction carries many jobs
and at rest a submit starts one at once. A request is answered only after its transaction has
committed. A request's items always commit together; if a shared transaction fails on something
other than contention or an unreachable database, each request in it is retried alone, so one
request's fault never fails another's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

from app import errors, observability
from app.domain import jobs as spec
from app.domain import schedule as cron
from app.domain.shards import due_minute
from app.store import Database, Store
from app.store import jobs as store

log = logging.getLogger(__name__)

WRITER_MAX_ROWS_DEFAULT = 1000
WRITER_IN_FLIGHT_DEFAULT = 4


@dataclass(frozen=True, slots=True)
class Submission:
    """One validated job, ready to store."""

    job: spec.JobSpec
    tenant_id: UUID
    idempotency_key: str | None
    fingerprint: str | None
    traceparent: str | None = None
    # The object-store key of a payload over the inline limit (app.api.payloads.keep_large).
    payload_ref: str | None = None


@dataclass(frozen=True, slots=True)
class Created:
    job_id: UUID
    next_run_at: datetime | None
    replayed: bool
    warnings: tuple[str, ...] = ()


Outcome = Created | errors.KairosError


def new_job_row(s: Submission, queue: str) -> store.NewJob:
    job = s.job
    once = isinstance(job.schedule, spec.OnceSchedule)
    every = job.schedule if isinstance(job.schedule, spec.EverySchedule) else None
    c = job.schedule if isinstance(job.schedule, cron.CronSchedule) else None
    return store.NewJob(
        job_id=job.job_id, tenant_id=s.tenant_id, name=job.name, target_type=job.target.type,
        target_ref=job.target.ref, queue=queue, payload=job.payload,
        schedule_kind="once" if once else "every" if every else "cron",
        run_at=job.schedule.run_at if once else None,
        cron=c.expr if c else None, cron_resolved=job.cron_resolved, tz=c.tz if c else None,
        jitter_s=c.jitter_s if c else every.jitter_s if every else 0, dst_gap=c.dst.gap if c else "shift",
        dst_repeat=c.dst.repeat if c else "once", max_attempts=job.retry.max_attempts,
        backoff_s=job.retry.backoff_s, max_backoff_s=job.retry.effective_max_backoff_s,
        timeout_s=job.timeout_s, concurrency=job.concurrency, misfire=job.misfire,
        next_nominal_at=job.first_nominal_at, next_run_at=job.first_run_at,
        idempotency_key=s.idempotency_key, request_hash=s.fingerprint,
        start_at=job.options.start_at, end_at=job.options.end_at,
        every_s=every.every_s if every else None, anchor_at=every.anchor if every else None,
        labels=job.options.labels, dry_run=job.options.dry_run,
        max_retry_duration_s=job.options.max_retry_duration_s, http_method=job.options.http_method,
        http_headers=job.options.http_headers, traceparent=s.traceparent,
        payload_ref=s.payload_ref,
    )


def _herd_warning(due: int, minute: datetime) -> str:
    return (f"{due} occurrences of this tenant are due in the minute {minute.isoformat().replace('+00:00', 'Z')}: "
            "set schedule.jitterSeconds (e.g. 300) to spread this job over a window instead of the top of the "
            "minute")


def not_granted(ref: str) -> errors.Forbidden:
    """A ``shared/<pool>`` target whose pool does not exist or is not granted to the tenant (one answer for
    both, so a tenant cannot probe for shared pools it has no grant on)."""
    return errors.Forbidden(f"pool {ref!r} is not a shared pool this tenant is granted")


async def store_many(tx: Store, subs: Sequence[Submission], herd_threshold: int | None = None) -> list[Outcome]:
    """Store submissions in the caller's transaction; one outcome per submission, in order.

    A new recurring job whose first occurrence lands on a minute where its tenant already has
    ``herd_threshold`` occurrences due (this one included) comes back with a herd warning."""
    shared = [spec.shared_pool_of(s.job.target) for s in subs]
    granted = await tx.jobs.shared_pool_access_many(sorted({
        (s.tenant_id, pool) for s, pool in zip(subs, shared, strict=True) if pool is not None}))
    out: list[Outcome | None] = [None] * len(subs)
    rows: list[store.NewJob] = []
    for i, s in enumerate(subs):
        if shared[i] is not None and not granted.get((s.tenant_id, shared[i])):
            out[i] = not_granted(s.job.target.ref)
            continue
        rows.append(new_job_row(s, spec.queue_for(s.job.target, s.tenant_id)))
    inserted = await tx.jobs.insert_many(rows)
    taken = sorted({(s.tenant_id, s.idempotency_key) for i, s in enumerate(subs)
                    if out[i] is None and s.job.job_id not in inserted and s.idempotency_key is not None})
    earlier = await tx.jobs.by_idempotency_keys(taken)
    for i, s in enumerate(subs):
        if out[i] is not None:
            continue
        if s.job.job_id in inserted:
            out[i] = Created(s.job.job_id, s.job.first_run_at, replayed=False)
            continue
        assert s.idempotency_key is not None, "only a taken idempotency key keeps a job out"
        hit = earlier[(s.tenant_id, s.idempotency_key)]
        out[i] = (Created(hit.job_id, hit.first_run_at, replayed=True) if hit.request_hash == s.fingerprint
                  else errors.IdempotencyConflict())
    if herd_threshold is not None:
        recurring = [(i, s, o) for i, (s, o) in enumerate(zip(subs, out, strict=True))
                     if isinstance(o, Created) and not o.replayed and not isinstance(s.job.schedule, spec.OnceSchedule)]
        minutes = {(s.tenant_id, due_minute(s.job.first_run_at)) for _, s, _ in recurring}
        due = await tx.jobs.due_per_minute(sorted(minutes)) if minutes else {}
        for i, s, created in recurring:
            minute = due_minute(s.job.first_run_at)
            count = due.get((s.tenant_id, minute), 0)
            if count >= herd_threshold:
                out[i] = replace(created, warnings=(_herd_warning(count, minute),))
    queues = {r.job_id: r.queue for r in rows}
    for s, outcome in zip(subs, out, strict=True):
        if isinstance(outcome, Created) and not outcome.replayed and s.job.skipped_before_first:
            await tx.jobs.record_skipped(s.job.job_id, s.tenant_id, queues[s.job.job_id],
                                       s.job.retry.max_attempts,
                                       [o.nominal_utc for o in s.job.skipped_before_first], "dst_gap")
    return out  # type: ignore[return-value]


@dataclass(frozen=True)
class WriterConfig:
    # Jobs per transaction at most (a request's items are never split, so one request may exceed it).
    max_rows: int = WRITER_MAX_ROWS_DEFAULT
    # Transactions in flight at once per process.
    in_flight: int = WRITER_IN_FLIGHT_DEFAULT
    # KAIROS_HERD_WARNING_THRESHOLD (None: no herd warnings).
    herd_threshold: int | None = None

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.in_flight < 1:
            raise ValueError("max_rows and in_flight must be at least 1")


@dataclass
class _Request:
    subs: list[Submission]
    done: asyncio.Future[list[Outcome]]


class SubmitWriter:
    """Group commit of submits (see the module docstring)."""

    def __init__(self, db: Database, config: WriterConfig = WriterConfig()) -> None:
        self.db = db
        self.config = config
        self._waiting: list[_Request] = []
        self._flushes: set[asyncio.Task[None]] = set()

    async def submit(self, subs: list[Submission]) -> list[Outcome]:
        """Store ``subs`` in one transaction (perhaps shared with other requests); their outcomes."""
        if not subs:
            return []
        request = _Request(subs, asyncio.get_running_loop().create_future())
        self._waiting.append(request)
        self._start_flushes()
        # Shielded: a client that goes away does not cancel a transaction other requests share.
        return await asyncio.shield(request.done)

    def _start_flushes(self) -> None:
        while self._waiting and len(self._flushes) < self.config.in_flight:
            group, rows = [], 0
            while self._waiting and (not group or rows + len(self._waiting[0].subs) <= self.config.max_rows):
                request = self._waiting.pop(0)
                group.append(request)
                rows += len(request.subs)
            task = asyncio.create_task(self._flush(group), name="submit-flush")
            self._flushes.add(task)
            task.add_done_callback(self._flushed)

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        self._start_flushes()

    async def _flush(self, group: list[_Request]) -> None:
        subs = [s for r in group for s in r.subs]
        try:
            outcomes = await self.db.transaction(lambda tx: store_many(tx, subs, self.config.herd_threshold))
        except (errors.DatabaseUnavailable, errors.TransactionRetriesExhausted) as exc:
            for r in group:
                _settle(r, exc)
            return
        except Exception as exc:
            if len(group) == 1:
                _settle(group[0], exc)
                return
            log.warning("shared submit transaction failed; retrying its requests one by one",
                        extra={"requests": len(group), "error": str(exc)})
            await asyncio.gather(*(self._flush([r]) for r in group))
            return
        at = 0
        for r in group:
            _settle(r, outcomes[at:at + len(r.subs)])
            at += len(r.subs)
        created = sum(1 for o in outcomes if isinstance(o, Created) and not o.replayed)
        if created:
            observability.jobs_submitted.add(created)

    async def close(self) -> None:
        """Wait for transactions in flight (and what waits behind them) to finish."""
        while self._flushes:
            await asyncio.gather(*list(self._flushes), return_exceptions=True)


def _settle(request: _Request, result: list[Outcome] | BaseException) -> None:
    if request.done.done():
        return
    if isinstance(result, BaseException):
        request.done.set_exception(result)
    else:
        request.done.set_result(result)
