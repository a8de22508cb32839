"""The heartbeat of one running execution: extends its lease, and cancels its handler on LEASE_LOST."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc

from kairos_sdk.client import Execution, WorkerClient

log = logging.getLogger("kairos.worker")


class Heartbeat:
    """Heartbeats one execution every third of the lease; LEASE_LOST cancels the task running its handler.

    A timer between beats and a task only while a call is in flight: most executions finish
    before their first beat, so they cost a timer handle rather than a sleeping task.
    """

    def __init__(self, client: WorkerClient, execution: Execution, handler: asyncio.Task[Any],
                 lease_seconds: float) -> None:
        self.client = client
        self.execution = execution
        self.handler = handler
        self.lease_seconds = lease_seconds
        self.interval = max(0.2, lease_seconds / 3)
        self.lost = False
        self._stopped = False
        self._call: asyncio.Task[None] | None = None
        self._timer: asyncio.TimerHandle | None = asyncio.get_running_loop().call_later(self.interval, self._due)

    def stop(self) -> None:
        self._stopped = True
        if self._timer is not None:
            self._timer.cancel()
        if self._call is not None:
            self._call.cancel()

    def _due(self) -> None:
        self._timer = None
        if not self._stopped:
            self._call = asyncio.create_task(self._beat(), name=f"heartbeat-{self.execution.execution_id}")

    async def _beat(self) -> None:
        e = self.execution
        try:
            answer = await self.client.heartbeat(e.execution_id, e.attempt, self.lease_seconds)
        except grpc.aio.AioRpcError as exc:
            log.warning("heartbeat failed", extra={"execution_id": e.execution_id, "code": exc.code().name})
            answer = None
        self._call = None
        if self._stopped:
            return
        if answer is not None and answer.lease_lost:
            self.lost = True
            self.handler.cancel()
        else:
            self._timer = asyncio.get_running_loop().call_later(self.interval, self._due)
