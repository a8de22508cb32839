"""Dispatcher: pop due entries from the heap and turn them into executions, a batch at a time.

One transaction per batch: a fenced claim (DispatchClaimDue deletes the batch's due_index rows
of shards still held under the revision the entries were loaded with, and returns each row's
job), then the plan for every claimed row is computed by app.scheduler.planning (overlap
policy, misfire policy, the cron chain's next occurrence; pure) and written by at most two more statements over arrays
(DispatchCancelReplaced for replace-overlap jobs, DispatchRecord for executions, next due rows
and job updates). Batches that were fenced are dropped from the heap: whoever holds the shard
now loads them.

Dispatch transactions run at READ COMMITTED by default (ARCHITECTURE.md: production runs claim
transactions at READ COMMITTED). Correctness never rests on the isolation level: the due row is
deleted by exactly one transaction (row locks, then re-evaluation), UNIQUE (job_id, scheduled_for)
refuses a second execution of an occurrence, one due row per job is a unique index, and the job
update is guarded on the state the claim read. At SERIALIZABLE on PostgreSQL, concurrent batches
collide on predicate locks (page-level false positives) and are re-run: correct, but slower.

Dispatch ahead: entries are popped ahead of their due time and become executions whose ready_at
is their due time, so at the due time only leasing is left (a herd's rows are written, and its
planner statistics refreshed, before it falls due). How far ahead is app.scheduler.ahead's: at
least ``ahead_s``, more when what falls due soon takes longer than that to dispatch at the rate
this process measured, at most ``ahead_max_s``. The window's far edge never moves back: a herd
whose dispatch has begun is dispatched to its end. What must be decided at the due time
is not decided early: an occurrence of a job with concurrency forbid, replace or buffer_one, claimed before it
is due, has its due row put back unchanged and waits in the heap until it is due; cancel cancels
ready executions, and pause withdraws an execution dispatched ahead (store.jobs.withdraw_ahead).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from app import errors, observability
from app.config import Settings
from app.domain.states import ExecutionState
from app.observability import tracing
from app.scheduler.ahead import AheadWindow, DispatchRate
from app.scheduler.heap import DueEntry, DueHeap
from app.scheduler.planning import Plan, plan_claim
from app.scheduler.run_limits import limit_runs
from app.store import Database, Store
from app.store import dispatch as dispatch_store

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

# The dispatch_lag histogram gets at most about this many points per batch (an even sample).
LAG_SAMPLES_PER_BATCH = 64
# Clean batches in a row before one more batch may be in flight again after contention.
CLEAN_BATCHES_TO_GROW = 10


@dataclass(frozen=True)
class DispatcherConfig:
    batch_size: int = 2000
    # Batches in flight at once: the database works on some while this process plans the next.
    max_inflight_batches: int = 3
    # Longest sleep when nothing is due (the loader wakes us earlier when it adds work).
    idle_wait_s: float = 1.0
    # Catch-up misfires become ready at most this fast per tenant, so a restart is no herd.
    catch_up_per_tenant_per_s: float = 10.0
    # Pause after a batch failed with a non-retryable error before its entries are tried again.
    failure_backoff_s: float = 0.5
    # Isolation of dispatch transactions (None: the database default). See the module docstring.
    isolation: str | None = "READ COMMITTED"
    # How long before its due time an occurrence is dispatched at least, and at most (its execution
    # waits, ready at the due time); see app.scheduler.ahead.
    ahead_s: float = 5.0
    ahead_max_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 <= self.ahead_s <= self.ahead_max_s or self.batch_size < 1 or self.max_inflight_batches < 1:
            raise ValueError("0 <= ahead_s <= ahead_max_s, batch_size >= 1 and max_inflight_batches >= 1 are required")

    @classmethod
    def from_settings(cls, settings: Settings) -> DispatcherConfig:
        return cls(
            batch_size=settings.dispatch_batch_size,
            max_inflight_batches=settings.dispatch_inflight_batches,
            catch_up_per_tenant_per_s=settings.catch_up_per_tenant_per_s,
            isolation=settings.dispatch_isolation,
            ahead_s=settings.dispatch_ahead_s,
            ahead_max_s=max(settings.dispatch_ahead_s, settings.dispatch_ahead_max_s),
        )


@dataclass
class BatchResult:
    claimed: int = 0
    fenced: int = 0
    vanished: int = 0
    ready: int = 0
    skipped: int = 0
    failed: int = 0
    lags_s: list[float] = field(default_factory=list)

    def add(self, other: BatchResult) -> None:
        for name in ("claimed", "fenced", "vanished", "ready", "skipped", "failed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.lags_s.extend(other.lags_s)


# ----------------------------------------------------------------------------------------------
# The duty
# ----------------------------------------------------------------------------------------------


def _trace(c: dispatch_store.Claim, e: dispatch_store.NewExecution) -> str | None:
    """The traceparent of an occurrence about to run (app.observability.tracing); none for a record."""
    if e.state != ExecutionState.READY:
        return None
    return tracing.occurrence(
        c.job_traceparent,
        one_off=c.schedule_kind == "once",
        attributes={
            "kairos.job_id": str(c.job_id),
            "kairos.tenant_id": str(c.tenant_id),
            "kairos.scheduled_for": e.scheduled_for.isoformat(),
        },
    )


class Dispatcher:
    def __init__(
        self,
        db: Database,
        owner: str,
        heap: DueHeap,
        config: DispatcherConfig = DispatcherConfig(),
        clock: Clock | None = None,
        wake: asyncio.Event | None = None,
    ) -> None:
        self.db = db
        self.owner = owner
        self.heap = heap
        self.config = config
        self.clock = clock  # None: wall clock here, the database clock in SQL
        self.wake = wake or asyncio.Event()
        self._catch_up_slots: dict[UUID, datetime] = {}
        self.totals = BatchResult()
        # Batches allowed in flight now: halved when a batch gives up on conflicts with its
        # siblings (SERIALIZABLE false positives), grown back by one per run of clean batches.
        self.inflight_limit = config.max_inflight_batches
        self._clean_batches = 0
        self.window = AheadWindow(config.ahead_s, config.ahead_max_s)
        self.rate = DispatchRate()
        self._horizon_ts = float("-inf")  # the far edge of what may be popped; never moves back

    def ahead(self, now_ts: float) -> tuple[float, float | None]:
        """How far ahead of ``now_ts`` to pop now, and when to look again at the latest (None: no need)."""
        plan = self.window.plan(now_ts, self.heap.due_counts(now_ts + self.config.ahead_max_s), self.rate.per_s)
        self._horizon_ts = max(self._horizon_ts, now_ts + plan.ahead_s)
        return self._horizon_ts - now_ts, plan.recheck_ts

    def _now(self) -> datetime:
        return self.clock() if self.clock else datetime.now(timezone.utc)

    def _sql_now(self) -> datetime | None:
        return self.clock() if self.clock else None

    def _catch_up_slot(self, tenant_id: UUID) -> datetime:
        now = self._now()
        slot = max(now, self._catch_up_slots.get(tenant_id, now))
        self._catch_up_slots[tenant_id] = slot + timedelta(seconds=1 / self.config.catch_up_per_tenant_per_s)
        return slot

    async def run_once(self) -> BatchResult:
        """Dispatch everything due now, batch after batch (tests call this)."""
        total = BatchResult()
        while True:
            now_ts = self._now().timestamp()
            batch = self.heap.pop_due(now_ts, self.config.batch_size, self.ahead(now_ts)[0])
            if not batch:
                return total
            total.add(await self.dispatch(batch))

    async def dispatch(self, batch: Sequence[DueEntry]) -> BatchResult:
        """One transaction for the whole batch; settles the entries in the heap afterwards."""
        sql_now = self._sql_now()
        slots_before = dict(self._catch_up_slots)

        async def work(tx: Store) -> tuple[list[dispatch_store.Claim], list[Plan], dispatch_store.Recorded | None]:
            self._catch_up_slots = dict(slots_before)  # a retried transaction plans afresh
            claims = await tx.dispatch.claim(self.owner, batch, sql_now)
            now = self._now()
            claimed = [c for c in claims if c.claimed]
            plans = [limit_runs(plan_claim(c, now, self._catch_up_slot), c) for c in claimed]
            executions = [e for p in plans for e in p.executions]
            traces = [_trace(c, e) for c, p in zip(claimed, plans, strict=True) for e in p.executions]
            next_due = [p.next_due for p in plans if p.next_due is not None]
            advances = [p.advance for p in plans if p.advance is not None]
            replacements = [p.replacement for p in plans if p.replacement is not None]
            if not (executions or next_due or advances):
                return claims, plans, None
            await tx.dispatch.cancel_replaced(replacements, sql_now)
            recorded = await tx.dispatch.record(executions, next_due, advances, sql_now, traceparents=traces)
            return claims, plans, recorded

        result = BatchResult()
        try:
            claims, plans, recorded = await self.db.transaction(work, isolation=self.config.isolation)
        except asyncio.CancelledError:
            self.heap.requeue(batch)
            raise
        except errors.TransactionRetriesExhausted:
            self.inflight_limit = max(1, self.inflight_limit // 2)
            self._clean_batches = 0
            log.warning(
                "dispatch batch kept conflicting; fewer batches in flight",
                extra={"entries": len(batch), "inflight_limit": self.inflight_limit},
            )
            result.failed = len(batch)
            self.heap.requeue(batch)
            return result
        except Exception:
            log.exception("dispatch batch failed", extra={"entries": len(batch)})
            result.failed = len(batch)
            await asyncio.sleep(self.config.failure_backoff_s)
            self.heap.requeue(batch)
            return result
        self._clean_batches += 1
        if self.inflight_limit < self.config.max_inflight_batches and self._clean_batches >= CLEAN_BATCHES_TO_GROW:
            self.inflight_limit += 1
            self._clean_batches = 0
        fenced, settled, held = [], [], []
        held_ids = {p.next_due.job_id for p in plans if p.held and p.next_due is not None}
        for entry, c in zip(batch, claims, strict=True):  # the claim answers every batch row, in order
            if c.fenced and not c.claimed:
                fenced.append(entry)
            elif c.claimed and entry.job_id in held_ids:
                held.append(entry)
            else:
                settled.append(entry)
                if not c.claimed:
                    result.vanished += 1
        self.heap.settle(settled)
        self.heap.hold(held)
        result.claimed = sum(1 for c in claims if c.claimed) - len(held)
        if fenced:
            self.heap.forget(fenced)
            result.fenced = len(fenced)
            observability.dispatch_fenced.add(1)
            log.warning(
                "dispatch batch refused by the shard fence",
                extra={"owner": self.owner, "fenced": len(fenced), "shards": sorted({e.shard_id for e in fenced})},
            )
        if recorded is not None:
            result.ready, result.skipped = recorded.ready, recorded.skipped
            if recorded.ready:
                observability.dispatched.add(recorded.ready)
            if recorded.skipped:
                observability.executions.add(recorded.skipped, {"outcome": "skipped"})
        result.lags_s = [p.lag_s for p in plans if p.lag_s is not None]
        # plans are the claimed claims' plans, in order: a lag's tenant and queue are its claim's.
        lagged = [
            (c, p.lag_s) for c, p in zip([c for c in claims if c.claimed], plans, strict=True) if p.lag_s is not None
        ]
        # Recording a histogram point costs ~25 us: a big batch records an even sample of its lags.
        stride = max(1, len(lagged) // LAG_SAMPLES_PER_BATCH)
        for c, lag in lagged[::stride]:
            observability.dispatch_lag.record(
                lag, {"tenant": str(c.tenant_id), "queue": observability.queue_kind(c.queue or "")}
            )
        self.totals.add(
            BatchResult(result.claimed, result.fenced, result.vanished, result.ready, result.skipped, result.failed)
        )
        return result

    async def run(self, stop: asyncio.Event) -> None:
        cfg = self.config
        inflight: set[asyncio.Task[BatchResult]] = set()
        try:
            while not stop.is_set():
                self.wake.clear()
                now_ts = self._now().timestamp()
                ahead_s, recheck_ts = self.ahead(now_ts)
                popped = 0
                while len(inflight) < self.inflight_limit:
                    batch = self.heap.pop_due(now_ts, cfg.batch_size, ahead_s)
                    if not batch:
                        break
                    popped += len(batch)
                    inflight.add(asyncio.create_task(self.dispatch(batch), name="scheduler.dispatch-batch"))
                # A spell of backlog (this fill took every batch slot) measures how fast this process dispatches.
                if inflight:
                    backlog = popped > 0 and len(inflight) >= self.inflight_limit
                    self.rate.popped(time.monotonic(), popped, backlog=backlog)
                else:
                    self.rate.idle(time.monotonic())
                waiters: set[asyncio.Future[Any]] = set(inflight)
                timeout: float | None = None
                if len(inflight) < self.inflight_limit:
                    wake_ts = self.heap.next_wake_ts(ahead_s)
                    if recheck_ts is not None:
                        wake_ts = recheck_ts if wake_ts is None else min(wake_ts, recheck_ts)
                    timeout = cfg.idle_wait_s
                    if wake_ts is not None:
                        timeout = min(cfg.idle_wait_s, max(0.0, wake_ts - now_ts))
                    waiters.add(asyncio.ensure_future(self.wake.wait()))
                stopper = asyncio.ensure_future(stop.wait())
                waiters.add(stopper)
                await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                for w in waiters:
                    if w not in inflight:
                        w.cancel()
                for task in [t for t in inflight if t.done()]:
                    inflight.discard(task)
                    if not task.cancelled() and task.exception() is not None:
                        log.error("dispatch task crashed", exc_info=task.exception())
        finally:
            if inflight:
                # Let batches already in their transaction finish: their rows are claimed either way.
                await asyncio.wait(inflight, timeout=5.0)
                for task in inflight:
                    task.cancel()
