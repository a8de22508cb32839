"""Submitting jobs: single and batched, through one group-committing writer per API process.

Every submit (``POST /v1/jobs`` and each valid item of ``POST /v1/jobs:batch``) is validated on
its own, then handed to the process's ``SubmitWriter``. The writer commits what is waiting with one
statement over arrays (``JobInsertMany``), which is its own transaction (``store_alone``; a critical
tenant's submit and a job with DST-skipped first occurrences take a transaction around it,
``store_many``); submits that arrive while transactions are in flight wait for the next one, so
under load a transaction carries many jobs and at rest a submit starts one at once. A request is
answered only after its transaction has committed. A request's items always commit together; if a
shared transaction fails on something other than contention or an unreachable database, each
request in it is retried alone, so one request's fault never fails another's.

Quotas (docs/quotas.md) are checked here, where every submit passes: the submit rate when a request
arrives (a token bucket per tenant in this process), the active-jobs quota when it is flushed (a
count bounded by the quota). A tenant with neither costs one cached dict lookup per request. The
refusals, the manual-run quota and the critical tenants' cache are app.api.jobs._quotas's.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from uuid import UUID

import msgspec

from app import errors, observability
from app.api.jobs._quotas import CriticalTenants, ManualRunQuota, active_jobs_exceeded, submit_rate_exceeded
from app.domain import jobs as job_rules
from app.domain import schedule as schedule_rules
from app.domain.limits import TokenBuckets
from app.domain.shards import due_minute
from app.store import Database, Store, tenants
from app.store import jobs as jobs_store

log = logging.getLogger(__name__)

WRITER_MAX_ROWS_DEFAULT = 1000
WRITER_IN_FLIGHT_DEFAULT = 4
QUOTA_TTL_S_DEFAULT = 5.0
# A (tenant, minute) found crowded is not counted again for this long: a tenant submitting thousands of
# recurring jobs onto one minute gets its warning without a count per flush. Bounded in size.
CROWDED_MEMO_S = 5.0
CROWDED_MEMO_MAX = 10_000


@dataclass(frozen=True, slots=True)
class Submission:
    """One validated job, ready to store."""

    job: job_rules.JobSpec
    tenant_id: UUID
    idempotency_key: str | None
    fingerprint: str | None
    traceparent: str | None = None
    # The object-store key of a payload over the inline limit (app.api.jobs.large_payloads.keep_large).
    payload_ref: str | None = None


@dataclass(frozen=True, slots=True)
class Created:
    job_id: UUID
    next_run_at: datetime | None
    replayed: bool
    warnings: tuple[str, ...] = ()


Outcome = Created | errors.KairosError


def new_job_row(s: Submission, queue: str) -> jobs_store.NewJob:
    job = s.job
    once = isinstance(job.schedule, job_rules.OnceSchedule)
    every = job.schedule if isinstance(job.schedule, job_rules.EverySchedule) else None
    c = job.schedule if isinstance(job.schedule, schedule_rules.CronSchedule) else None
    return jobs_store.NewJob(
        job_id=job.job_id,
        tenant_id=s.tenant_id,
        name=job.name,
        target_type=job.target.type,
        target_ref=job.target.ref,
        queue=queue,
        payload=job.payload,
        schedule_kind="once" if once else "every" if every else "cron",
        run_at=job.schedule.run_at if isinstance(job.schedule, job_rules.OnceSchedule) else None,
        cron=c.expr if c else None,
        cron_resolved=job.cron_resolved,
        tz=c.tz if c else every.tz if every else None,
        jitter_s=c.jitter_s if c else every.jitter_s if every else 0,
        dst_gap=c.dst.gap if c else every.dst.gap if every else "shift",
        dst_repeat=c.dst.repeat if c else every.dst.repeat if every else "once",
        max_attempts=job.retry.max_attempts,
        backoff_s=job.retry.backoff_s,
        max_backoff_s=job.retry.effective_max_backoff_s,
        timeout_s=job.timeout_s,
        concurrency=job.concurrency,
        misfire=job.misfire,
        next_nominal_at=job.first_nominal_at,
        next_run_at=job.first_run_at,
        idempotency_key=s.idempotency_key,
        request_hash=s.fingerprint,
        every_s=every.every_s if every else None,
        anchor_at=every.anchor if every else None,
        traceparent=s.traceparent,
        payload_ref=s.payload_ref,
        payload_json=job.payload_json,
        # A job's options are columns of the same names: a new option needs no line here.
        **msgspec.structs.asdict(job.options),
    )


def _herd_warning(due: int, minute: datetime, dispatch_per_s: int | None) -> str:
    at = minute.isoformat().replace("+00:00", "Z")
    pace = ""
    if dispatch_per_s is not None:
        # What the herd costs at the tenant's dispatch quota (docs/quotas.md, "Dispatch rate").
        pace = (
            f"; this tenant's occurrences are dispatched at most {dispatch_per_s:,} a second (its dispatch "
            f"quota): each {dispatch_per_s:,} more due at one instant start a second later (an operator "
            "raises the quota with `kairos tenants set-quota <tenant> --max-dispatch-per-s N`, docs/quotas.md)"
        )
    return (
        f"at least {due} occurrences of this tenant are due in the minute {at}: set schedule.jitterSeconds "
        f"(e.g. 300) to spread this job over a window instead of the top of the minute{pace}"
    )


def not_granted(ref: str) -> errors.Forbidden:
    """A ``shared/<pool>`` target whose pool does not exist or is not granted to the tenant (one answer for
    both, so a tenant cannot probe for shared pools it has no grant on)."""
    return errors.Forbidden(f"pool {ref!r} is not a shared pool this tenant is granted")


async def store_many(tx: Store, subs: Sequence[Submission], *, stored: frozenset[UUID] | None = None) -> list[Outcome]:
    """Store submissions in the caller's transaction; one outcome per submission, in order.

    ``stored``: the job ids of these submissions found stored after an ambiguous commit of this
    same call (``landed``): nothing is written, the outcomes are those the commit produced."""
    out, rows = _rows(subs, await tx.jobs.shared_pool_access_many(_shared_pairs(subs)))
    inserted = await tx.jobs.insert_many(rows) if stored is None else stored
    outcomes = _answers(subs, out, inserted, await tx.jobs.by_idempotency_keys(_taken(subs, out, inserted)))
    queues = {r.job_id: r.queue for r in rows}
    for s, outcome in zip(subs, outcomes, strict=True):
        if stored is None and isinstance(outcome, Created) and not outcome.replayed and s.job.skipped_before_first:
            await tx.jobs.record_skipped(
                s.job.job_id,
                s.tenant_id,
                queues[s.job.job_id],
                s.job.retry.max_attempts,
                [o.nominal_utc for o in s.job.skipped_before_first],
                "dst_gap",
            )
    return outcomes


async def store_alone(db: Database, subs: Sequence[Submission]) -> list[Outcome] | None:
    """``store_many``'s outcomes with every statement its own transaction (``Database.statement``):
    the insert of all of ``subs`` is one statement, so they still commit together, and the common
    submit (own pools, no Idempotency-Key taken) costs one round trip instead of four (pool pre-ping,
    BEGIN, insert, COMMIT). The insert guards itself (ON CONFLICT on the tenant's idempotency key),
    so it needs no isolation beyond the statement's. None when the commit was ambiguous and did not
    land (CockroachDB): the caller stores ``subs`` in a transaction instead."""
    pairs = _shared_pairs(subs)
    granted = await db.statement(lambda tx: tx.jobs.shared_pool_access_many(pairs)) if pairs else {}
    out, rows = _rows(subs, granted)
    try:
        inserted = await db.statement(lambda tx: tx.jobs.insert_many(rows))
    except errors.CommitAmbiguous:  # read back as an ambiguous COMMIT is
        return await db.transaction(lambda tx: landed(tx, subs), isolation="READ COMMITTED")
    taken = _taken(subs, out, inserted)
    earlier = await db.statement(lambda tx: tx.jobs.by_idempotency_keys(taken)) if taken else {}
    return _answers(subs, out, inserted, earlier)


def _shared_pairs(subs: Sequence[Submission]) -> list[tuple[UUID, str]]:
    """The (tenant, shared pool) grants the submissions' targets need."""
    return sorted({(s.tenant_id, pool) for s in subs if (pool := job_rules.shared_pool_of(s.job.target)) is not None})


def _rows(
    subs: Sequence[Submission], granted: Mapping[tuple[UUID, str], bool]
) -> tuple[list[Outcome | None], list[jobs_store.NewJob]]:
    """Per submission its refusal (a shared pool not granted) or None, and the rows of the others."""
    out: list[Outcome | None] = [None] * len(subs)
    rows: list[jobs_store.NewJob] = []
    for i, s in enumerate(subs):
        pool = job_rules.shared_pool_of(s.job.target)
        if pool is not None and not granted.get((s.tenant_id, pool)):
            out[i] = not_granted(s.job.target.ref)
            continue
        rows.append(new_job_row(s, job_rules.queue_for(s.job.target, s.tenant_id)))
    return out, rows


def _taken(
    subs: Sequence[Submission], out: list[Outcome | None], inserted: set[UUID] | frozenset[UUID]
) -> list[tuple[UUID, str]]:
    """The (tenant, Idempotency-Key) pairs of submissions the insert left out: an earlier job holds the key."""
    return sorted(
        {
            (s.tenant_id, s.idempotency_key)
            for i, s in enumerate(subs)
            if out[i] is None and s.job.job_id not in inserted and s.idempotency_key is not None
        }
    )


def _answers(
    subs: Sequence[Submission],
    out: list[Outcome | None],
    inserted: set[UUID] | frozenset[UUID],
    earlier: Mapping[tuple[UUID, str], jobs_store.IdempotentHit],
) -> list[Outcome]:
    """Every submission's outcome: refused, created, or answered as the earlier job with its key was."""
    answers: list[Outcome] = []
    for s, refused in zip(subs, out, strict=True):
        if refused is not None:
            answers.append(refused)
        elif s.job.job_id in inserted:
            answers.append(Created(s.job.job_id, s.job.first_run_at, replayed=False))
        else:
            assert s.idempotency_key is not None, "only a taken idempotency key keeps a job out"
            hit = earlier[(s.tenant_id, s.idempotency_key)]
            answers.append(
                Created(hit.job_id, hit.first_run_at, replayed=True)
                if hit.request_hash == s.fingerprint
                else errors.IdempotencyConflict()
            )
    return answers


async def landed(tx: Store, subs: Sequence[Submission]) -> list[Outcome] | None:
    """After an ambiguous commit of ``store_many(subs)``: its outcomes if it landed, None if not.

    The job ids were chosen before the transaction first ran, and a transaction that inserts no job
    writes nothing, so "any of them is stored" is "it committed" (never re-inserted blindly); the
    submissions it did not insert are answered, as the commit answered them, from their
    Idempotency-Keys."""
    found = await tx.durability.existing_jobs(s.job.job_id for s in subs)
    if not found:
        return None
    return await store_many(tx, subs, stored=found)


@dataclass(frozen=True)
class WriterConfig:
    # Jobs per transaction at most (a request's items are never split, so one request may exceed it).
    max_rows: int = WRITER_MAX_ROWS_DEFAULT
    # Transactions in flight at once per process.
    in_flight: int = WRITER_IN_FLIGHT_DEFAULT
    # KAIROS_HERD_WARNING_THRESHOLD (None: no herd warnings).
    herd_threshold: int | None = None
    # How long a tenant's submit quotas are cached: a changed quota applies within this long.
    quota_ttl_s: float = QUOTA_TTL_S_DEFAULT

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.in_flight < 1:
            raise ValueError("max_rows and in_flight must be at least 1")


@dataclass
class _Request:
    subs: list[Submission]
    done: asyncio.Future[list[Outcome]]
    # The tenant's active-jobs quota, when it has one (checked when the request is flushed).
    max_active_jobs: int | None = None
    # A critical tenant's request: committed with synchronous_commit = remote_apply, never in a
    # transaction with other tenants' requests (they would wait for the standby too).
    critical: bool = False


class SubmitWriter:
    """Group commit of submits (see the module docstring)."""

    def __init__(
        self, db: Database, config: WriterConfig = WriterConfig(), clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.db = db
        self.config = config
        self.quotas = tenants.QuotaCache(config.quota_ttl_s)
        self.critical = CriticalTenants()
        # The submit rate: one token bucket per tenant in this process (docs/quotas.md says why).
        self.rates = TokenBuckets()
        self._clock = clock
        self.manual = ManualRunQuota(db, self.quotas, clock)
        self._waiting: list[_Request] = []
        # (tenant, due minute) found at the herd threshold -> when this process found it so.
        self._crowded: dict[tuple[UUID, datetime], float] = {}
        self._flushes: set[asyncio.Task[None]] = set()

    async def submit(self, subs: list[Submission]) -> list[Outcome]:
        """Store one request's ``subs`` (one tenant's) in one transaction, perhaps shared with other
        requests; their outcomes, in order.

        The tenant's quotas (docs/quotas.md): over its submit rate, the items beyond the tokens its
        bucket holds come back as TenantQuotaExceeded, and when not one fits the call raises it; over
        its active-jobs quota, the items beyond it come back as TenantQuotaExceeded. Refused items
        write nothing."""
        if not subs:
            return []
        tenant_id = subs[0].tenant_id
        quota = self.quotas.cached(tenant_id) or await self.quotas.get(self.db, tenant_id)
        refused: list[Outcome] = []
        if quota.max_submit_per_s is not None:
            subs, refused = self._admit(subs, quota.max_submit_per_s)
        request = _Request(
            subs,
            asyncio.get_running_loop().create_future(),
            quota.max_active_jobs,
            await self.critical.contains(self.db, tenant_id),
        )
        self._waiting.append(request)
        self._start_flushes()
        # Shielded: a client that goes away does not cancel a transaction other requests share.
        return await asyncio.shield(request.done) + refused

    def _admit(self, subs: list[Submission], rate: int) -> tuple[list[Submission], list[Outcome]]:
        """The first items the tenant's bucket has tokens for, and the refusals of the rest (raised
        when none has one). The bucket holds one second's worth."""
        tenant_id = subs[0].tenant_id
        now = self._clock()
        taken = self.rates.take(tenant_id, len(subs), rate, rate, now)
        if taken.granted < len(subs):
            observability.quota_refusals.add(len(subs) - taken.granted, {"quota": "max_submit_per_s"})
        if taken.granted == 0:
            raise submit_rate_exceeded(rate, taken.retry_after_s)
        if taken.granted == len(subs):
            return subs, []
        over = submit_rate_exceeded(rate, self.rates.wait_s(tenant_id, rate, rate, now))
        return subs[: taken.granted], [over] * (len(subs) - taken.granted)

    def _start_flushes(self) -> None:
        while self._waiting and len(self._flushes) < self.config.in_flight:
            group: list[_Request] = []
            rows = 0
            while self._waiting and (not group or rows + len(self._waiting[0].subs) <= self.config.max_rows):
                request = self._next_waiting(critical=group[0].critical if group else None)
                if request is None:
                    break
                group.append(request)
                rows += len(request.subs)
            task = asyncio.create_task(self._flush(group), name="submit-flush")
            self._flushes.add(task)
            task.add_done_callback(self._flushed)

    def _next_waiting(self, *, critical: bool | None) -> _Request | None:
        """The oldest waiting request (of the given criticality, when given): a transaction carries
        critical tenants' requests or the others', never both."""
        for i, request in enumerate(self._waiting):
            if critical is None or request.critical == critical:
                return self._waiting.pop(i)
        return None

    def _flushed(self, task: asyncio.Task[None]) -> None:
        self._flushes.discard(task)
        self._start_flushes()

    async def _flush(self, group: list[_Request]) -> None:
        try:
            verdicts = await self._active_jobs_verdicts(group)
            subs = [
                s
                for r, v in zip(group, verdicts, strict=True)
                for i, s in enumerate(r.subs)
                if v is None or v[i] is None
            ]
            outcomes = await self._write(subs, critical=group[0].critical) if subs else []
        except (errors.DatabaseUnavailable, errors.TransactionRetriesExhausted) as exc:
            for r in group:
                _settle(r, exc)
            return
        except Exception as exc:  # noqa: BLE001 - settled into each waiting request, which raises it
            if len(group) == 1:
                _settle(group[0], exc)
                return
            log.warning(
                "shared submit transaction failed; retrying its requests one by one",
                extra={"requests": len(group), "error": str(exc)},
            )
            await asyncio.gather(*(self._flush([r]) for r in group))
            return
        stored = iter(outcomes)
        for r, v in zip(group, verdicts, strict=True):
            _settle(
                r, [next(stored) if v is None or (refused := v[i]) is None else refused for i in range(len(r.subs))]
            )
        created = sum(1 for o in outcomes if isinstance(o, Created) and not o.replayed)
        if created:
            observability.jobs_submitted.add(created)

    async def _write(self, subs: list[Submission], *, critical: bool) -> list[Outcome]:
        """Store ``subs``: as statements of their own (``store_alone``), or in one transaction when a
        statement alone cannot (a critical tenant's commit waits for the synchronous standby; a job whose
        first occurrences a DST rule skipped records them with it) or an ambiguous commit did not land.
        The transaction's ambiguous commit is resolved by ``landed`` (Database.transaction's ``on_ambiguous``)."""

        async def write(tx: Store) -> list[Outcome]:
            if critical:
                await tx.durability.commit_on_standby()
            return await store_many(tx, subs)

        alone = not critical and not any(s.job.skipped_before_first for s in subs)
        outcomes = await store_alone(self.db, subs) if alone else None
        if outcomes is None:
            outcomes = await self.db.transaction(write, on_ambiguous=lambda tx: landed(tx, subs))
        return await self._with_herd_warnings(subs, outcomes)

    async def _with_herd_warnings(self, subs: list[Submission], outcomes: list[Outcome]) -> list[Outcome]:
        """Warn each new recurring job whose first occurrence lands on a minute where its tenant has
        ``herd_threshold`` occurrences due (this one included).

        Counted after the commit, at READ COMMITTED, in a transaction of its own and only up to the
        threshold: inside the serializable write, the count would make a tenant's concurrent submits
        of recurring jobs conflict with each other, and an unbounded count costs a scan of the whole
        minute per submit. The warning is advice: a count that fails leaves the jobs stored and
        unwarned."""
        threshold = self.config.herd_threshold
        recurring = [
            i
            for i, (s, o) in enumerate(zip(subs, outcomes, strict=True))
            if isinstance(o, Created) and not o.replayed and not isinstance(s.job.schedule, job_rules.OnceSchedule)
        ]
        if threshold is None or not recurring:
            return outcomes
        now = self._clock()
        minutes = {(subs[i].tenant_id, due_minute(subs[i].job.first_run_at)) for i in recurring}
        crowded = {m for m in minutes if now - self._crowded.get(m, -math.inf) < CROWDED_MEMO_S}
        if to_count := sorted(minutes - crowded):
            try:
                due = await self.db.transaction(
                    lambda tx: tx.jobs.due_per_minute(to_count, threshold), isolation="READ COMMITTED"
                )
            except Exception as exc:  # noqa: BLE001 - advice only: the jobs are committed and the answer must say so
                log.warning("herd warning count failed; the jobs are stored without it", extra={"error": str(exc)})
                due = {}
            found = {m for m in to_count if due.get(m, 0) >= threshold}
            self._remember_crowded(found, now)
            crowded |= found
        out = list(outcomes)
        for i in recurring:
            minute, created = due_minute(subs[i].job.first_run_at), outcomes[i]
            if isinstance(created, Created) and (subs[i].tenant_id, minute) in crowded:
                quota = self.quotas.cached(subs[i].tenant_id)
                pace = quota.max_dispatch_per_s if quota is not None else None
                out[i] = replace(created, warnings=(_herd_warning(threshold, minute, pace),))
        return out

    def _remember_crowded(self, found: set[tuple[UUID, datetime]], now: float) -> None:
        """Keep ``found`` as crowded from ``now``; when full, forget the expired first, then the oldest."""
        if not found:
            return
        if len(self._crowded) + len(found) > CROWDED_MEMO_MAX:
            self._crowded = {m: t for m, t in self._crowded.items() if now - t < CROWDED_MEMO_S}
            while self._crowded and len(self._crowded) + len(found) > CROWDED_MEMO_MAX:
                del self._crowded[next(iter(self._crowded))]
        for m in found:
            self._crowded.pop(m, None)  # re-inserted: the dict stays in order of when each was found
            self._crowded[m] = now

    async def _active_jobs_verdicts(self, group: list[_Request]) -> list[list[Outcome | None] | None]:
        """Per request, None when all its items may be stored, else per item None (store it) or the
        refusal of an item beyond its tenant's active-jobs quota.

        The count is read before the write, at READ COMMITTED, in its own transaction: inside the
        serializable write it would make concurrent submits of the tenant conflict (and a sequential
        scan, which the planner picks when one tenant owns most jobs, conflicts with every insert into
        jobs). So concurrent transactions may each pass the check: a tenant can go over its quota by
        what the transactions in flight at that moment carry, never further (docs/quotas.md)."""
        caps = {r.subs[0].tenant_id: r.max_active_jobs for r in group if r.max_active_jobs is not None}
        if not caps:
            return [None] * len(group)
        keys = sorted(
            {
                (s.tenant_id, s.idempotency_key)
                for r in group
                if r.max_active_jobs is not None
                for s in r.subs
                if s.idempotency_key is not None
            }
        )

        async def read(tx: Store) -> tuple[dict[UUID, int], set[tuple[UUID, str]]]:
            counts = {t: await tx.tenants.active_job_count(t, cap) for t, cap in caps.items()}
            return counts, set(await tx.jobs.by_idempotency_keys(keys))

        counts, earlier = await self.db.transaction(read, isolation="READ COMMITTED")
        room = {t: cap - counts[t] for t, cap in caps.items()}
        verdicts: list[list[Outcome | None] | None] = []
        for r in group:
            if r.max_active_jobs is None:
                verdicts.append(None)
                continue
            tenant_id = r.subs[0].tenant_id
            verdict: list[Outcome | None] = []
            for s in r.subs:
                if s.idempotency_key is not None and (tenant_id, s.idempotency_key) in earlier:
                    verdict.append(None)  # a retry of an earlier submit adds no job: answered as that one was
                elif room[tenant_id] > 0:
                    room[tenant_id] -= 1
                    verdict.append(None)
                else:
                    verdict.append(active_jobs_exceeded(caps[tenant_id]))
            over = sum(o is not None for o in verdict)
            if over:
                observability.quota_refusals.add(over, {"quota": "max_active_jobs"})
            verdicts.append(verdict if over else None)
        return verdicts

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
