"""Turn many concurrent Complete/Fail calls into one batched transaction.

Workers finish executions one at a time, but the store's statements take arrays. A
``Coalescer`` queues items from concurrent callers and runs up to ``max_batch`` of them per
``flush`` call (one transaction), with at most ``max_flushes`` transactions in flight; each
caller awaits its own answer. Under light load a batch is a single item and adds no delay.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar
from uuid import UUID

from app import observability
from app.domain.states import ExecutionState
from app.store import Database
from app.store import executions as ex

log = logging.getLogger(__name__)
In = TypeVar("In")
Out = TypeVar("Out")


class Coalescer(Generic[In, Out]):
    def __init__(self, name: str, flush: Callable[[Sequence[In]], Awaitable[Sequence[Out]]], *,
                 max_batch: int = 500, max_flushes: int = 2) -> None:
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
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch:]
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
    execution_id: UUID
    attempt: int
    delay_s: float


class Outcomes:
    """Complete, fail and defer executions through batched transactions (shared by RPC and HTTP pool)."""

    def __init__(self, db: Database, *, max_batch: int = 500, isolation: str = "READ COMMITTED") -> None:
        self.db = db
        # Every statement is guarded on (state, attempt), so READ COMMITTED is safe and avoids
        # serialization failures between concurrent batches touching neighbouring rows.
        self.isolation = isolation
        self.completer: Coalescer[ex.Success, bool] = Coalescer("complete", self._complete, max_batch=max_batch)
        self.failer: Coalescer[ex.Failure, ex.FailOutcome] = Coalescer("fail", self._fail, max_batch=max_batch)
        self.deferrer: Coalescer[Deferral, bool] = Coalescer("defer", self._defer, max_batch=max_batch)

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

    async def _complete(self, items: Sequence[ex.Success]) -> list[bool]:
        answers = await self.db.transaction(lambda tx: tx.executions.complete_many(items), isolation=self.isolation)
        out = [answers.get(i.execution_id, False) for i in items]
        ok = sum(out)
        if ok:
            observability.finished.add(ok, {"outcome": "succeeded"})
        if len(out) - ok:
            observability.lease_lost.add(len(out) - ok, {"call": "complete"})
        return out

    async def _fail(self, items: Sequence[ex.Failure]) -> list[ex.FailOutcome]:
        answers = await self.db.transaction(lambda tx: tx.executions.fail_many(items), isolation=self.isolation)
        out = [answers.get(i.execution_id) or ex.FailOutcome(i.execution_id, None, None) for i in items]
        for o in out:
            if o.state is None:
                observability.lease_lost.add(1, {"call": "fail"})
            else:
                observability.finished.add(1, {"outcome": "retry" if o.state == ExecutionState.READY else "dead"})
        return out

    async def _defer(self, items: Sequence[Deferral]) -> list[bool]:
        refs = [ex.AttemptRef(i.execution_id, i.attempt) for i in items]
        await self.db.transaction(lambda tx: tx.executions.defer_many(refs, [i.delay_s for i in items]),
                                  isolation=self.isolation)
        return [True] * len(items)
