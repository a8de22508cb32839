"""The Python worker SDK: lease executions of a pool, run a handler, complete or fail them.

    from kairos_sdk import Worker

    async def send_email(execution):
        ...                     # execution.payload, execution.idempotency_key, execution.attempt
        return {"sent": True}   # becomes the execution's result

    Worker("emails", send_email, concurrency=20).run_forever()

Pools: ``Worker("emails", ...)`` with a tenant key serves that tenant's own pool ``emails`` (jobs
targeting ``"ref": "emails"``); ``Worker("shared/emails", ...)`` with a shared pool's worker key
serves the operator's shared pool ``emails`` (jobs targeting ``"ref": "shared/emails"``). The two
are different pools even when both exist: a shared pool never takes a tenant's own pool's jobs.

Model: the worker leases up to its free slots with a long poll, runs each execution's handler
concurrently (at most ``concurrency`` at once), heartbeats every third of the lease from the moment
it is leased, and completes (handler returned) or fails
(handler raised; ``NonRetryable`` dead-letters at once) with the exception text. If a
heartbeat answers LEASE_LOST (another worker owns the execution now, or it was cancelled or
timed out), the handler is cancelled and its result is not reported. Outcomes are buffered for
``report_s`` (a few milliseconds) and sent together with CompleteMany / FailMany, each item
fenced by its own attempt: an item answered LEASE_LOST is counted and logged as a lost lease,
exactly as a single Complete would be (executors without the batched calls get one call per
execution). On SIGTERM or SIGINT it stops leasing, sends what is buffered at once, lets running
handlers finish for ``grace_s``, and fails the rest as retryable.
Leasing ahead (``prefetch``): a slot that frees while a Lease call is on its way waits for that
call, so for short handlers (a process per execution, a no-op) the worker leases up to ``prefetch``
executions more than it has slots; they wait in the worker, heartbeaten, for the next free slot.
The default (None) sizes it from what the worker measures, the Lease round trip against the
handlers' duration (slots that free during one round trip, at most twice ``concurrency``: a
round trip longer than a handler must bring more than the slots hold): about 0 for handlers that
run for seconds, so a worker never sits on work another one could start; 0 turns it off. Idle,
the worker has one Lease long poll out. Under load one call is in flight (``lease_calls``), for
the places free when it leaves (every free place, prefetch included, unless ``batch`` caps a
call); more calls at once fill the slots that free during a round trip sooner, which pays where
the executor is far away. Near it, a second call only added contention: the 100,000-job herd
drained 14,147/s on average with one call per worker against 12,448/s with two, and command
workers were no slower (docs/performance.md, "Worker SDK"). An execution's timeout counts
from its lease, as on the server.
A worker that has leased nothing for ``idle_notice_s`` (60 s) with nothing running says so at INFO,
once per such stretch: a pool that no job of the key's tenant targets looks exactly like a quiet
one from here (the protocol has no call to ask), and this line is the hint.
Configuration comes from KAIROS_GRPC_ADDR (default 127.0.0.1:50051) and KAIROS_API_KEY.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from kairos_sdk.client import Execution, WorkerClient
from kairos_sdk.heartbeat import LeaseGroup
from kairos_sdk.reporter import OutcomeReporter

log = logging.getLogger("kairos.worker")

Handler = Callable[[Execution], Any] | Callable[[Execution], Awaitable[Any]]
MAX_ERROR_CHARS = 4000
IDLE_NOTICE_S_DEFAULT = 60.0
# A pool named "shared/<name>" is an operator's shared pool; any other name is the key's tenant's own.
SHARED_POOL_PREFIX = "shared/"


class NonRetryable(Exception):
    """Raise from a handler when the execution can never succeed: it is dead-lettered at once."""


class _Slots:
    """At most ``n`` handlers at once, first come first served. asyncio.Semaphore would do, but its
    acquire looks at every waiter (CPython 3.11 ``locked()``), and a loaded worker has hundreds of
    leased executions waiting for a slot: 4.5 us an acquisition against 2.4 us here, with 768 tasks
    on 256 slots."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, n: int) -> None:
        self._free = n
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        place: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(place)
        try:
            await place
        except asyncio.CancelledError:
            if place.done() and not place.cancelled():
                self._release()  # handed a slot as the cancellation came: pass it on
            elif place in self._waiters:  # (a release may have dropped it already)
                self._waiters.remove(place)
            raise

    async def __aexit__(self, *_exc: object) -> None:
        self._release()

    def _release(self) -> None:
        while self._waiters:
            place = self._waiters.popleft()
            if not place.done():
                place.set_result(None)
                return
        self._free += 1


class Worker:
    def __init__(
        self,
        pool: str,
        handler: Handler,
        *,
        addr: str | None = None,
        api_key: str | None = None,
        concurrency: int = 10,
        lease_seconds: float = 30.0,
        wait_seconds: float = 5.0,
        batch: int | None = None,
        worker_id: str | None = None,
        grace_s: float | None = None,
        report_s: float = 0.005,
        report_max: int = 500,
        idle_notice_s: float | None = IDLE_NOTICE_S_DEFAULT,
        prefetch: int | None = None,
        gather_s: float = 0.002,
        lease_calls: int = 1,
    ) -> None:
        self.pool = pool
        self.handler = handler
        self.addr = addr
        self.api_key = api_key
        self.concurrency = max(1, concurrency)
        self.lease_seconds = lease_seconds
        self.wait_seconds = wait_seconds
        self.batch = batch or self.concurrency
        self._batch_given = batch is not None  # else a call may ask for every free slot, prefetch included
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}"
        self.grace_s = lease_seconds if grace_s is None else grace_s
        self.report_s = report_s
        self.report_max = report_max
        self.idle_notice_s = idle_notice_s  # None or 0: never
        self.prefetch = prefetch if prefetch is None else max(0, prefetch)  # None: sized from measurements
        self.gather_s = gather_s  # how long a Lease waits for more slots to free under load
        self.lease_calls = max(1, lease_calls)  # Lease calls in flight at once under load (one when idle)
        self._slots = _Slots(self.concurrency)
        self._lease_rtt_s = 0.0  # moving averages: a Lease call's round trip, a handler's run
        self._handler_s = 0.0
        self.stats = {"completed": 0, "failed": 0, "lease_lost": 0}
        self._running: dict[asyncio.Task[None], Execution] = {}
        # Executions leased and not yet past their handler (running, or waiting for a slot): what
        # concurrency + prefetch bounds. An execution whose outcome is only being reported holds no
        # slot (the report is batched and brief).
        self._busy = 0
        self._slot_freed = asyncio.Event()
        self._handlers: dict[str, asyncio.Task[Any]] = {}  # execution_id -> its task, while in the handler
        self._stopped_late: set[asyncio.Task[Any]] = set()  # cancelled by shutdown, not by a lost lease
        self._reporter: OutcomeReporter | None = None

    @property
    def handler(self) -> Handler:
        return self._handler

    @handler.setter
    def handler(self, handler: Handler) -> None:
        self._handler = handler
        self._handler_is_async = inspect.iscoroutinefunction(handler)  # asked once, not per execution

    # -- entry points ------------------------------------------------------------------------
    def run_forever(self) -> None:
        """Run until SIGTERM or SIGINT (blocking; for scripts and ``kairos worker``)."""

        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, stop.set)
            await self.run(stop)

        asyncio.run(main())

    async def run(self, stop: asyncio.Event) -> None:
        client = WorkerClient(self.addr, self.api_key)
        # A report is worth sending again while the lease it settles lasts.
        self._reporter = OutcomeReporter(
            client, report_s=self.report_s, report_max=self.report_max, retry_s=self.lease_seconds
        )
        try:
            await self._lease_loop(client, stop)
            self._reporter.closing()
            await self._drain(client)
        finally:
            await self._reporter.close()
            await client.close()
        log.info("worker stopped", extra={"pool": self.pool, **self.stats})

    # -- leasing -----------------------------------------------------------------------------
    @property
    def lease_ahead(self) -> int:
        """How many executions beyond ``concurrency`` the worker leases now (see ``prefetch``)."""
        if self.prefetch is not None:
            return self.prefetch
        if self._handler_s <= 0.0:
            return 0
        return min(2 * self.concurrency, int(self.concurrency * self._lease_rtt_s / self._handler_s))

    @staticmethod
    def _average(current: float, sample: float) -> float:
        return sample if current <= 0.0 else 0.9 * current + 0.1 * sample

    def _note_idle(self, leased: int, idle_since: float) -> float:
        """After a Lease answer: when the current idle stretch began, logging once it lasts ``idle_notice_s``."""
        now = asyncio.get_running_loop().time()
        if leased or self._running:
            return now
        if self.idle_notice_s and now - idle_since >= self.idle_notice_s:
            hint = (
                "is any job of a granted tenant targeting it?"
                if self.pool.startswith(SHARED_POOL_PREFIX)
                else f"is any job targeting queue {self.pool} with this tenant's key?"
            )
            log.info(
                "no work leased from pool %s in the last %g s: %s",
                self.pool,
                self.idle_notice_s,
                hint,
                extra={"pool": self.pool, "idle_s": round(now - idle_since, 1)},
            )
            return now
        return idle_since

    async def _lease_loop(self, client: WorkerClient, stop: asyncio.Event) -> None:
        stopped = asyncio.ensure_future(stop.wait())
        loop = asyncio.get_running_loop()
        idle_since = loop.time()
        gather_until = 0.0  # while free places are too few for a call, wait for more until then
        was_full = False
        brought_work = False  # did the last Lease answer bring any: under load, not idle
        backoff, not_before = 0.2, 0.0
        calls: dict[asyncio.Future[list[Execution]], tuple[int, float]] = {}  # Lease in flight -> (asked, sent)
        try:
            while not stop.is_set():
                room = self.concurrency + self.lease_ahead
                free = room - self._busy - sum(n for n, _ in calls.values())
                # A call's size bounds what it brings in one round trip: without an explicit batch it may
                # take every free place.
                most = self.batch if self._batch_given else room
                # Idle (the last answer was empty), one long poll, however small a batch it asks for; under
                # load up to lease_calls: with more than one, a call goes out while another is on its way,
                # so slots that free during a round trip are filled by the next answer, not the one after.
                loaded = self._busy > 0 or (bool(calls) and brought_work)
                # Under load slots free one by one: a call asks for half a batch at least (waiting up to
                # gather_s for it), or every call pays the server's fair-lease planning for a few rows.
                enough = max(1, min(most, room) // 2) if loaded else 1
                may_call = len(calls) < (self.lease_calls if loaded else 1)
                now = loop.time()
                if free <= 0:
                    was_full = True
                elif was_full:
                    was_full, gather_until = False, now + self.gather_s
                if may_call and free > 0 and now >= not_before and (free >= enough or now >= gather_until):
                    ask = min(free, most)
                    calls[
                        asyncio.ensure_future(
                            client.lease(self.pool, self.worker_id, ask, self.lease_seconds, self.wait_seconds)
                        )
                    ] = (ask, now)
                    continue
                waits: list[asyncio.Future[Any]] = [stopped, *calls]
                freed = None
                if may_call:
                    self._slot_freed.clear()
                    freed = asyncio.ensure_future(self._slot_freed.wait())
                    waits.append(freed)
                timeout = None
                if may_call and free > 0:
                    timeout = max(0.0, max(not_before, gather_until if free < enough else 0.0) - now)
                await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if freed is not None:
                    freed.cancel()
                for call in [c for c in calls if c.done()]:
                    _, sent = calls.pop(call)
                    try:
                        got = call.result()
                    except grpc.aio.AioRpcError as exc:
                        if exc.code() in (
                            grpc.StatusCode.UNAUTHENTICATED,
                            grpc.StatusCode.PERMISSION_DENIED,
                            grpc.StatusCode.INVALID_ARGUMENT,
                        ):
                            raise
                        log.warning("lease failed; retrying", extra={"code": exc.code().name, "details": exc.details()})
                        not_before = loop.time() + backoff
                        backoff = min(5.0, backoff * 2)
                        continue
                    brought_work = bool(got)
                    if got:  # a long poll that found nothing says nothing of the round trip
                        self._lease_rtt_s = self._average(self._lease_rtt_s, loop.time() - sent)
                    backoff = 0.2
                    idle_since = self._note_idle(len(got), idle_since)
                    self._start(client, got)
        finally:
            stopped.cancel()
            for call in calls:
                call.cancel()  # the server sees the cancellation before it leases anything
            for outcome in await asyncio.gather(*calls, return_exceptions=True):
                if isinstance(outcome, list):  # answered before the cancellation reached it
                    self._start(client, outcome)

    def _start(self, client: WorkerClient, got: list[Execution]) -> None:
        if not got:
            return
        group = LeaseGroup(client, self.lease_seconds)
        for execution in got:
            self._busy += 1
            task = asyncio.create_task(self._run_one(execution, group), name=f"execution-{execution.execution_id}")
            self._running[task] = execution
            self._handlers[execution.execution_id] = task
            task.add_done_callback(self._ran)
            group.add(execution, task)
        group.start()

    def _ran(self, task: asyncio.Task[None]) -> None:
        self._running.pop(task, None)

    async def _drain(self, client: WorkerClient) -> None:
        if not self._running:
            return
        log.info(
            "stopping: letting running executions finish",
            extra={"running": len(self._running), "grace_s": self.grace_s},
        )
        running = set(self._running)
        _, late = await asyncio.wait(running, timeout=self.grace_s)
        for task in late:
            execution = self._running.get(task)
            if execution is not None and self._handlers.get(execution.execution_id) is task:
                self._stopped_late.add(task)
                task.cancel()  # still in its handler: _run_one fails it as retryable
        if late:
            await asyncio.wait(late, timeout=10)

    # -- one execution -----------------------------------------------------------------------
    async def _call_handler(self, execution: Execution) -> Any:
        if self._handler_is_async:
            return await self.handler(execution)
        result = await asyncio.to_thread(self.handler, execution)
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _run_one(self, execution: Execution, group: LeaseGroup) -> None:
        # The handler runs in this task (no task of its own): a LEASE_LOST heartbeat, the timeout
        # (both the lease group's) or a late shutdown cancels this task while it is in the handler
        # phase (registered in _handlers by _start, until the finally below).
        eid, attempt = execution.execution_id, execution.attempt
        task = self._handlers[eid]
        loop = asyncio.get_running_loop()
        try:
            try:
                async with self._slots:
                    began = loop.time()
                    result = await self._call_handler(execution)
                    self._handler_s = self._average(self._handler_s, loop.time() - began)
                error, retryable = None, True
            except asyncio.CancelledError:
                if group.lost(eid):
                    task.uncancel()
                    self.stats["lease_lost"] += 1
                    log.warning("lease lost; result dropped", extra={"execution_id": eid, "attempt": attempt})
                    return
                if group.timed_out(eid):
                    task.uncancel()
                    error, retryable = f"timed out after {execution.timeout_seconds}s", True
                elif task not in self._stopped_late:
                    raise
                else:
                    task.uncancel()
                    error, retryable = "worker stopped before the handler finished", True
            except NonRetryable as exc:
                error, retryable = _describe(exc), False
            except Exception as exc:  # noqa: BLE001 - whatever the handler raised is its failure, retried
                error, retryable = _describe(exc), True
        finally:
            group.finished(eid)
            self._handlers.pop(eid, None)
            self._stopped_late.discard(task)
            self._busy -= 1
            self._slot_freed.set()
        reporter = self._reporter
        assert reporter is not None  # set before the first lease and kept until the worker has stopped
        try:
            if error is None:
                answer = await reporter.complete(eid, attempt, result)
                self.stats["completed" if not answer.lease_lost else "lease_lost"] += 1
            else:
                answer = await reporter.fail(eid, attempt, error, retryable)
                self.stats["failed" if not answer.lease_lost else "lease_lost"] += 1
            if answer.lease_lost:
                log.warning("lease lost; outcome discarded", extra={"execution_id": eid, "attempt": attempt})
        except grpc.aio.AioRpcError as exc:
            # The lease will expire and the execution run again (at-least-once).
            log.error(
                "could not report outcome: %s %s",
                exc.code().name,
                exc.details(),
                extra={"execution_id": eid, "code": exc.code().name},
            )


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    if not isinstance(exc, NonRetryable) and type(exc).__name__ not in text:
        text = f"{type(exc).__name__}: {text}"
    return text[-MAX_ERROR_CHARS:]
