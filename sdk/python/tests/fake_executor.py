"""An in-process fake executor: the worker protocol's answers without a server or a database."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from kairos_sdk._proto import worker_pb2 as pb
from kairos_sdk._proto import worker_pb2_grpc as pb_grpc


def _ts(at: datetime) -> Timestamp:
    ts = Timestamp()
    ts.FromDatetime(at)
    return ts


@dataclass
class FakeExecutor(pb_grpc.WorkerServicer):
    """Hands out ``add``-ed executions and records every call; ``lost`` ids answer LEASE_LOST."""

    batched: bool = True
    calls: list[str] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    lease_asks: list[int] = field(default_factory=list)  # each Lease call's max
    outcomes: dict[str, tuple] = field(default_factory=dict)  # execution_id -> ("complete", result) | ("fail", ...)
    lost: set[str] = field(default_factory=set)
    # Set: CompleteMany answers only once it is released (an executor slow to acknowledge).
    hold_completes: asyncio.Event | None = None
    lease_delay_s: float = 0.0  # each Lease answers this much later (a round trip to a busy executor)
    unavailable_completes: int = 0  # this many CompleteMany calls answer UNAVAILABLE first (a restart)
    leases_in_flight: int = 0
    most_leases_in_flight: int = 0
    _ready: list[pb.LeasedExecution] = field(default_factory=list)
    _added: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, payload: object = None, *, timeout_seconds: int = 0) -> str:
        eid = str(uuid.uuid4())
        now = datetime.now(timezone.utc)
        self._ready.append(
            pb.LeasedExecution(
                execution_id=eid,
                job_id=str(uuid.uuid4()),
                attempt=1,
                payload=json.dumps(payload).encode(),
                scheduled_for=_ts(now),
                lease_until=_ts(now + timedelta(seconds=30)),
                idempotency_key=f"{eid}:1",
                max_attempts=3,
                timeout_seconds=timeout_seconds,
            )
        )
        self._added.set()
        return eid

    def _record(self, name: str, context: grpc.aio.ServicerContext) -> None:
        self.calls.append(name)
        self.keys.append(dict(context.invocation_metadata()).get("authorization", ""))

    async def Lease(self, request, context):
        self.leases_in_flight += 1
        self.most_leases_in_flight = max(self.most_leases_in_flight, self.leases_in_flight)
        try:
            if self.lease_delay_s:
                await asyncio.sleep(self.lease_delay_s)
            return await self._lease(request, context)
        finally:
            self.leases_in_flight -= 1

    async def _lease(self, request, context):
        self._record("Lease", context)
        self.lease_asks.append(request.max)
        deadline = time.monotonic() + request.wait_seconds
        while not self._ready and time.monotonic() < deadline:
            self._added.clear()
            try:
                await asyncio.wait_for(self._added.wait(), deadline - time.monotonic())
            except TimeoutError:
                break
        taken, self._ready = self._ready[: request.max], self._ready[request.max :]
        return pb.LeaseResponse(executions=taken)

    async def Heartbeat(self, request, context):
        self._record("Heartbeat", context)
        if request.execution_id in self.lost:
            return pb.HeartbeatResponse(outcome=pb.LEASE_LOST, message="another attempt is current")
        until = datetime.now(timezone.utc) + timedelta(seconds=request.lease_seconds)
        return pb.HeartbeatResponse(outcome=pb.OK, lease_until=_ts(until))

    def _complete(self, r: pb.CompleteRequest) -> int:
        if r.execution_id in self.lost:
            return pb.LEASE_LOST
        self.outcomes[r.execution_id] = ("complete", json.loads(r.result) if r.result else None)
        return pb.OK

    def _fail(self, r: pb.FailRequest) -> int:
        if r.execution_id in self.lost:
            return pb.LEASE_LOST
        self.outcomes[r.execution_id] = ("fail", r.error, r.retryable)
        return pb.RETRY_SCHEDULED if r.retryable else pb.DEAD

    async def Complete(self, request, context):
        self._record("Complete", context)
        return pb.CompleteResponse(outcome=self._complete(request))

    async def Fail(self, request, context):
        self._record("Fail", context)
        return pb.FailResponse(outcome=self._fail(request))

    async def CompleteMany(self, request, context):
        if not self.batched:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        self._record("CompleteMany", context)
        if self.unavailable_completes > 0:
            self.unavailable_completes -= 1
            await context.abort(grpc.StatusCode.UNAVAILABLE, "executor restarting")
        if self.hold_completes is not None:
            await self.hold_completes.wait()
        return pb.CompleteManyResponse(
            results=[
                pb.CompleteManyItem(execution_id=i.execution_id, attempt=i.attempt, outcome=self._complete(i))
                for i in request.items
            ]
        )

    async def FailMany(self, request, context):
        if not self.batched:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        self._record("FailMany", context)
        return pb.FailManyResponse(
            results=[
                pb.FailManyItem(execution_id=i.execution_id, attempt=i.attempt, outcome=self._fail(i))
                for i in request.items
            ]
        )


@dataclass
class Served:
    executor: FakeExecutor
    addr: str


async def until(condition: Callable[[], bool | Awaitable[bool]], *, timeout_s: float = 10, what: str) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        held = condition()
        if not isinstance(held, bool):
            held = await held
        if held:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)
