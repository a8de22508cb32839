"""Turn many concurrent Complete/Fail calls into one batched transaction.

Workers finish executions one at a time, but the store's statements take arrays. A
``Coalescer`` queues items from concurrent callers and runs up to ``max_batch`` of them per
``flush`` call (one transaction), with at most ``max_flushes`` transactions in flight; each
caller awaits its own answer. Under light load a batch is a single item and adds no delay.

``Outcomes`` also writes the executor's one INFO line per outcome (``execution outcome``: job_id,
execution_id, tenant_id, attempt, outcome, lag_ms) and counts it in ``kairos_executions_total``.
What it knows of an execution beyond its id and attempt comes from the lease this process handed
out (:meth:`Outcomes.track`, which also records ``kairos_start_lag_seconds``): an outcome reported
to another executor replica than the one that leased it is logged without job_id and lag_ms.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

from app import observability
from app.domain.states import ExecutionState
from app.observability import tracing
from app.store import Database
from app.store import executions as ex

log = logging.getLogger(__name__)
In = TypeVar("In")
Out = TypeVar("Out")


class Coalescer(Generic[In, Out]):
    def __init__(
        self,
        name: str,
        flush: Callable[[Sequence[In]], Awaitable[Sequence[Out]]],
        *,
        max_batch: int = 500,
        max_flushes: int = 2,
    ) -> None:
        self.name = name
        self._flush = flush
        self.max_batch = max_batch
        self.max_flushes = max_flushes
        self._pending: list[tuple[In, asyncio.Future[Out]]] = []
        self._active = 0
        self._tasks: set[asyncio.Task[None]] = set()

    async def submit(self, item: In) -> Out:
        fut: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._pending.append((item, fut))
        if self._active < self.max_flushes:
            self._active += 1
            task = asyncio.create_task(self._drain(), name=f"{self.name}-flush")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(fut)

    async def _drain(self) -> None:
        try:
            while self._pending:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
                try:
                    answers = await self._flush([item for item, _ in batch])
                except BaseException as exc:  # every caller of the batch gets the failure
                    for _, fut in batch:
                        if not fut.done():
                            fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for (_, fut), answer in zip(batch, answers, strict=True):
                    if not fut.done():
                        fut.set_result(answer)
        finally:
            self._active -= 1


@dataclass(frozen=True)
class Deferral:
    execution_id: ex.ExecutionRef
    attempt: int
    delay_s: float


# Leases remembered for the outcome lines: one entry per execution in flight from this process.
TRACKED_LEASES_MAX = 100_000


@dataclass(slots=True)  # one per leased execution: a frozen dataclass's __init__ costs four times as much
class _Lease:
    job_id: str
    tenant_id: str
    attempt: int
    lag_ms: float  # lease time - scheduled time
    scheduled_for: datetime  # the partition key of its row: the outcome's statement looks in one week only
    span: Any = None  # the attempt's trace span while tracing is on (app.observability.tracing)


class Outcomes:
    """Complete, fail and defer executions through batched transactions (shared by RPC and HTTP pool)."""

    def __init__(self, db: Database, *, max_batch: int = 500, isolation: str = "READ COMMITTED") -> None:
        self.db = db
        self._leases: OrderedDict[str, _Lease] = OrderedDict()  # by execution id (text, as leased)
        # Every statement is guarded on (state, attempt), so READ COMMITTED is safe and avoids
        # serialization failures between concurrent batches touching neighbouring rows.
        self.isolation = isolation
        self.completer: Coalescer[ex.Success, bool] = Coalescer("complete", self._complete, max_batch=max_batch)
        self.failer: Coalescer[ex.Failure, ex.FailOutcome] = Coalescer("fail", self._fail, max_batch=max_batch)
        self.deferrer: Coalescer[Deferral, bool] = Coalescer("defer", self._defer, max_batch=max_batch)

    def track(self, leased: Iterable[ex.Leased], lease_s: float, queue: str, *, started: bool = True) -> None:
        """Leases just handed out of ``queue`` for ``lease_s``: record the start lag of first attempts
        and remember each one for its outcome line. ``started=False`` (HTTP deliveries): the attempt starts
        when its request is sent, and :meth:`sent` records the lag then."""
        kind = observability.queue_kind(queue)
        traced = tracing.enabled()
        leases = self._leases
        record_lag = observability.start_lag.record
        attributes: dict[str, dict[str, str]] = {}  # one per tenant of the batch
        for item in leased:
            # The lease ends lease_s after it began, capped at the job's timeout (ExecutionLeaseFair).
            lag_s = (item.lease_until - item.scheduled_for).total_seconds() - min(lease_s, float(item.timeout_s))
            # A manual run or a backfill is not late by its scheduled_for: only scheduled occurrences count.
            if started and item.attempt == 1 and item.trigger == "schedule":
                attrs = attributes.get(item.tenant_id)
                if attrs is None:
                    attrs = attributes[item.tenant_id] = {"tenant": item.tenant_id, "queue": kind}
                record_lag(max(0.0, lag_s), attrs)
            span = None
            previous = leases.pop(item.execution_id, None)  # a re-lease: this attempt replaces it
            if traced:  # nothing of this on the lease path when tracing is off
                if previous is not None:
                    tracing.end_attempt(previous.span, "lease_lost")
                leased_at = item.lease_until - timedelta(seconds=min(lease_s, float(item.timeout_s)))
                span = tracing.start_attempt(
                    item.traceparent,
                    leased_at,
                    {
                        "kairos.job_id": item.job_id,
                        "kairos.execution_id": item.execution_id,
                        "kairos.attempt": item.attempt,
                        "kairos.queue_kind": kind,
                    },
                )
            leases[item.execution_id] = _Lease(
                item.job_id, item.tenant_id, item.attempt, round(lag_s * 1000, 1), item.scheduled_for, span
            )
        while len(leases) > TRACKED_LEASES_MAX:
            tracing.end_attempt(leases.popitem(last=False)[1].span, "untracked")

    def sent(self, item: ex.Leased, at: datetime, queue: str) -> None:
        """An HTTP delivery's request left at ``at``: its attempt's start, for the start lag of a first
        attempt and the outcome line."""
        lag_s = (at - item.scheduled_for).total_seconds()
        if item.attempt == 1 and item.trigger == "schedule":
            observability.start_lag.record(
                max(0.0, lag_s), {"tenant": item.tenant_id, "queue": observability.queue_kind(queue)}
            )
        lease = self._leases.get(item.execution_id)
        if lease is not None and lease.attempt == item.attempt:
            lease.lag_ms = round(lag_s * 1000, 1)

    def _settled(
        self, settled: Sequence[tuple[ex.ExecutionRef, int, str]], more: Sequence[dict[str, object]] | None = None
    ) -> None:
        """The outcome lines of a batch, (execution_id, attempt, outcome) each with ``more[i]``'s fields,
        and (but for a deferral, which is no attempt's outcome) their counts: one add per outcome, one
        write for the lines."""
        counts: dict[str, int] = {}
        rows = []
        leases = self._leases
        for i, (execution_id, attempt, outcome) in enumerate(settled):
            counts[outcome] = counts.get(outcome, 0) + 1
            # Ids as they are (text, or a UUID, which the JSON lines encode as the same text).
            fields: dict[str, object] = {"execution_id": execution_id, "attempt": attempt, "outcome": outcome}
            # The leases are keyed by text; the worker calls carry text, a caller holding a UUID pays one str().
            key = execution_id if type(execution_id) is str else str(execution_id)
            lease = leases.pop(key, None)
            if lease is not None and lease.attempt == attempt:
                fields.update(job_id=lease.job_id, tenant_id=lease.tenant_id, lag_ms=lease.lag_ms)
                if lease.span is not None:
                    tracing.end_attempt(lease.span, outcome)
            elif lease is not None:
                leases[key] = lease  # another attempt's: keep it for its own outcome
            if more is not None:
                fields.update(more[i])
            rows.append(fields)
        for outcome, n in counts.items():
            if outcome != "deferred":
                observability.executions.add(n, {"outcome": outcome})
        observability.log_many(log, logging.INFO, "execution outcome", rows)

    async def complete(self, item: ex.Success) -> bool:
        return await self.completer.submit(item)

    async def fail(self, item: ex.Failure) -> ex.FailOutcome:
        return await self.failer.submit(item)

    async def defer(self, item: Deferral) -> bool:
        return await self.deferrer.submit(item)

    async def complete_batch(self, items: Sequence[ex.Success]) -> list[bool]:
        """Complete a caller's own batch (CompleteMany) in one transaction, bypassing the coalescer."""
        return await self._complete(items) if items else []

    async def fail_batch(self, items: Sequence[ex.Failure]) -> list[ex.FailOutcome]:
        """Fail a caller's own batch (FailMany) in one transaction, bypassing the coalescer."""
        return await self._fail(items) if items else []

    def scheduled_for(self, execution_id: str) -> datetime | None:
        """The occurrence time of a lease this process handed out (None: leased elsewhere, or forgotten)."""
        lease = self._leases.get(execution_id)
        return lease.scheduled_for if lease is not None else None

    def _scheduled_fors(self, items: Sequence[ex.Success] | Sequence[ex.Failure]) -> list[datetime | None]:
        """Each item's occurrence time, from the lease this process handed out (None: leased elsewhere).
        The leases are keyed by text, as the worker calls carry ids; a caller holding a UUID pays one str()."""
        return [
            self.scheduled_for(i.execution_id if type(i.execution_id) is str else str(i.execution_id)) for i in items
        ]

    async def _complete(self, items: Sequence[ex.Success]) -> list[bool]:
        times = self._scheduled_fors(items)
        answers = await self.db.statement(lambda tx: tx.executions.complete_many(items, scheduled_fors=times))
        out = [answers.get(i.execution_id, False) for i in items]
        self._settled(
            [
                (item.execution_id, item.attempt, "succeeded" if ok else "lease_lost")
                for item, ok in zip(items, out, strict=True)
            ]
        )
        return out

    async def _fail(self, items: Sequence[ex.Failure]) -> list[ex.FailOutcome]:
        times = self._scheduled_fors(items)
        answers = await self.db.transaction(
            lambda tx: tx.executions.fail_many(items, scheduled_fors=times), isolation=self.isolation
        )
        out = [answers.get(i.execution_id) or ex.FailOutcome(i.execution_id, None, None) for i in items]
        self._settled(
            [
                (
                    item.execution_id,
                    item.attempt,
                    "lease_lost" if o.state is None else "retried" if o.state == ExecutionState.READY else "dead",
                )
                for item, o in zip(items, out, strict=True)
            ]
        )
        return out

    async def _defer(self, items: Sequence[Deferral]) -> list[bool]:
        refs = [ex.AttemptRef(i.execution_id, i.attempt) for i in items]
        await self.db.transaction(
            lambda tx: tx.executions.defer_many(refs, [i.delay_s for i in items]), isolation=self.isolation
        )
        self._settled(
            [(i.execution_id, i.attempt, "deferred") for i in items], [{"delay_s": round(i.delay_s, 3)} for i in items]
        )
        return [True] * len(items)
