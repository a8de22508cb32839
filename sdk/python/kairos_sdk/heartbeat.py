"""The heartbeats and deadlines of the executions one Lease answer brought.

The executions of one answer were leased together, for the same ``lease_seconds``: they fall due
for a heartbeat together, and those with the same ``timeout_seconds`` time out together. So a
LeaseGroup keeps one timer for the group's heartbeats and one per distinct timeout, instead of two
per execution (a timer and an ``asyncio.timeout``, 7.5 us of a no-op execution's 49 us in the herd:
docs/performance.md, "Worker SDK"). Most executions finish before their first beat; they only
leave the group.

Every third of the lease the group heartbeats each execution still in it, one call each (a task
only while its call is in flight); LEASE_LOST (another worker owns it now, or it was cancelled or
timed out on the server) cancels the task running its handler. An execution's timeout counts from
its lease, as on the server: when it passes, the tasks still in their handlers are cancelled.
What a cancellation meant is read back with ``lost`` and ``timed_out``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from kairos_sdk.client import Execution, WorkerClient

log = logging.getLogger("kairos.worker")


class LeaseGroup:
    """The executions leased by one answer, each with the task running it, until each has finished."""

    def __init__(self, client: WorkerClient, lease_seconds: float) -> None:
        self.client = client
        self.lease_seconds = lease_seconds
        self.interval = max(0.2, lease_seconds / 3)
        self._members: dict[str, tuple[Execution, asyncio.Task[Any]]] = {}
        self._calls: dict[str, asyncio.Task[None]] = {}  # execution_id -> its heartbeat in flight
        self._lost: set[str] = set()
        self._timed_out: set[str] = set()
        self._beat_timer: asyncio.TimerHandle | None = None
        self._deadlines: list[asyncio.TimerHandle] = []

    def add(self, execution: Execution, task: asyncio.Task[Any]) -> None:
        self._members[execution.execution_id] = (execution, task)

    def start(self) -> None:
        """Arm the group's timers: its heartbeat, and one deadline per distinct timeout."""
        loop = asyncio.get_running_loop()
        self._beat_timer = loop.call_later(self.interval, self._beat_due)
        timeouts = {e.timeout_seconds for e, _ in self._members.values() if e.timeout_seconds}
        self._deadlines = [loop.call_later(t, self._deadline, t) for t in timeouts]

    def lost(self, execution_id: str) -> bool:
        return execution_id in self._lost

    def timed_out(self, execution_id: str) -> bool:
        return execution_id in self._timed_out

    def finished(self, execution_id: str) -> None:
        """The execution left its handler: no more beats, no deadline. The last one out stops the timers."""
        self._members.pop(execution_id, None)
        call = self._calls.pop(execution_id, None)
        if call is not None:
            call.cancel()
        if not self._members:
            if self._beat_timer is not None:
                self._beat_timer.cancel()
                self._beat_timer = None
            for timer in self._deadlines:
                timer.cancel()
            self._deadlines.clear()

    def _deadline(self, timeout_s: int) -> None:
        for eid, (execution, task) in list(self._members.items()):
            if execution.timeout_seconds == timeout_s and eid not in self._lost:
                self._timed_out.add(eid)
                task.cancel()

    def _beat_due(self) -> None:
        self._beat_timer = None
        for eid, (execution, _) in self._members.items():
            if eid not in self._calls and eid not in self._lost:
                self._calls[eid] = asyncio.create_task(self._beat(execution), name=f"heartbeat-{eid}")
        if self._members:
            self._beat_timer = asyncio.get_running_loop().call_later(self.interval, self._beat_due)

    async def _beat(self, e: Execution) -> None:
        try:
            answer = await self.client.heartbeat(e.execution_id, e.attempt, self.lease_seconds)
        except grpc.aio.AioRpcError as exc:
            log.warning("heartbeat failed", extra={"execution_id": e.execution_id, "code": exc.code().name})
            answer = None
        self._calls.pop(e.execution_id, None)
        member = self._members.get(e.execution_id)
        if member is None or answer is None or not answer.lease_lost:
            return
        if e.execution_id not in self._timed_out:
            self._lost.add(e.execution_id)
            member[1].cancel()
