"""Outcome reporting: finished executions are buffered for a few milliseconds and sent together.

Each item of a CompleteMany / FailMany call is fenced by its own attempt, so an item answered
LEASE_LOST means exactly what a single Complete answering LEASE_LOST would. The same fencing makes
a report safe to send again: a call that failed in passing (an executor restarting, a database
failing over: UNAVAILABLE, or no answer in time) is sent again with backoff for up to ``retry_s``,
instead of the execution being run a second time once its lease expires.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import grpc

from kairos_sdk.client import Answer, WorkerClient

log = logging.getLogger("kairos.worker")

Item = TypeVar("Item", bound=tuple[Any, ...])

# A call that failed with one of these may succeed if sent again (reports are idempotent per attempt).
TRANSIENT = frozenset(
    {
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.ABORTED,
    }
)
RETRY_FIRST_S, RETRY_MOST_S = 0.1, 2.0

# One call for a batch of outcomes: an answer per item, or the exception that item raised.
_Sender = Callable[[list[Any]], Awaitable[Sequence[Answer | BaseException]]]


class _Batch(Generic[Item]):
    """Outcomes of one kind waiting to be sent, each with the future its reporter awaits."""

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.futures: list[asyncio.Future[Answer]] = []
        self.ids: set[str] = set()

    def __len__(self) -> int:
        return len(self.items)


class OutcomeReporter:
    """Buffers finished outcomes for ``report_s`` (or until ``report_max`` are waiting) and sends
    them with one CompleteMany and one FailMany call; each caller awaits its own item's Answer.

    ``closing()`` (shutdown) sends what is buffered at once and every later outcome immediately.
    An executor that does not know the batched calls (UNIMPLEMENTED) gets one call per outcome.
    """

    def __init__(
        self, client: WorkerClient, *, report_s: float = 0.005, report_max: int = 500, retry_s: float = 30.0
    ) -> None:
        self.client = client
        self.retry_s = retry_s  # how long a report that failed in passing is sent again
        self.report_s = report_s
        self.report_max = max(1, report_max)
        self.batched = True
        self._completes: _Batch[tuple[str, int, Any]] = _Batch()
        self._fails: _Batch[tuple[str, int, str, bool]] = _Batch()
        self._timer: asyncio.TimerHandle | None = None
        self._closing = False
        self._sending: set[asyncio.Task[None]] = set()

    def complete(self, execution_id: str, attempt: int, result: Any) -> asyncio.Future[Answer]:
        return self._add("complete", (execution_id, attempt, result))

    def fail(self, execution_id: str, attempt: int, error: str, retryable: bool) -> asyncio.Future[Answer]:
        return self._add("fail", (execution_id, attempt, error, retryable))

    def closing(self) -> None:
        self._closing = True
        self.flush()

    async def close(self) -> None:
        self.closing()
        while self._sending:
            await asyncio.gather(*self._sending, return_exceptions=True)

    def _add(self, kind: str, item: tuple[Any, ...]) -> asyncio.Future[Answer]:
        if item[0] in (self._completes if kind == "complete" else self._fails).ids:
            self.flush()  # one call carries an execution once (it was re-leased to this worker)
        batch = self._completes if kind == "complete" else self._fails
        fut: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        batch.items.append(item)
        batch.futures.append(fut)
        batch.ids.add(item[0])
        if self._closing or len(self._completes) + len(self._fails) >= self.report_max:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.report_s, self.flush)
        return fut

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for batch, send in ((self._completes, self._send_completes), (self._fails, self._send_fails)):
            if batch:
                task = asyncio.create_task(self._send(batch, send), name="report-outcomes")
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)
        self._completes, self._fails = _Batch(), _Batch()

    async def _send_completes(self, items: list[Any]) -> Sequence[Answer | BaseException]:
        if self.batched:
            try:
                return await self.client.complete_many(items)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._unbatched()
        return list(await asyncio.gather(*(self.client.complete(*i) for i in items), return_exceptions=True))

    async def _send_fails(self, items: list[Any]) -> Sequence[Answer | BaseException]:
        if self.batched:
            try:
                return await self.client.fail_many(items)
            except grpc.aio.AioRpcError as exc:
                if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise
                self._unbatched()
        return list(await asyncio.gather(*(self.client.fail(*i) for i in items), return_exceptions=True))

    def _unbatched(self) -> None:
        if self.batched:
            self.batched = False
            log.info("the executor has no batched outcome calls; reporting one call per execution")

    async def _send(self, batch: _Batch[Any], send: _Sender) -> None:
        try:
            answers = await self._sent(batch, send)
        except BaseException as exc:  # the call failed as a whole: every item's reporter sees why
            for fut in batch.futures:
                if not fut.done():
                    fut.set_exception(exc if isinstance(exc, Exception) else RuntimeError("report cancelled"))
            if not isinstance(exc, Exception):
                raise
            return
        for fut, answer in zip(batch.futures, answers, strict=True):
            if fut.done():
                continue
            if isinstance(answer, BaseException):
                fut.set_exception(answer)
            else:
                fut.set_result(answer)

    async def _sent(self, batch: _Batch[Any], send: _Sender) -> Sequence[Answer | BaseException]:
        """``send``'s answers for the batch, sending it again after a transient failure until ``retry_s``."""
        loop = asyncio.get_running_loop()
        give_up_at, delay = loop.time() + self.retry_s, RETRY_FIRST_S
        while True:
            try:
                return await send(batch.items)
            except grpc.aio.AioRpcError as exc:
                if exc.code() not in TRANSIENT or loop.time() + delay > give_up_at:
                    raise
                log.warning(
                    "reporting outcomes failed; sending them again",
                    extra={
                        "code": exc.code().name,
                        "details": exc.details(),
                        "outcomes": len(batch),
                        "retry_in_s": delay,
                    },
                )
                await asyncio.sleep(delay)
                delay = min(RETRY_MOST_S, delay * 2)
