"""A typed asyncio client of the Worker service (what ``Worker`` uses; no protos leak out)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from kairos_sdk._proto import worker_pb2 as pb
from kairos_sdk._proto import worker_pb2_grpc as pb_grpc

DEFAULT_ADDR = "127.0.0.1:50051"


@dataclass(frozen=True)
class Execution:
    """One leased execution: run it, then complete or fail it with its attempt number."""

    execution_id: str
    job_id: str
    attempt: int
    payload: Any
    scheduled_for: datetime
    lease_until: datetime
    idempotency_key: str
    max_attempts: int
    timeout_seconds: int


@dataclass(frozen=True)
class Answer:
    outcome: str  # ok | lease_lost | retry_scheduled | dead
    at: datetime | None = None  # lease_until (heartbeat) or retry_at (fail)
    message: str = ""

    @property
    def lease_lost(self) -> bool:
        return self.outcome == "lease_lost"


_OUTCOMES = {pb.OK: "ok", pb.LEASE_LOST: "lease_lost", pb.RETRY_SCHEDULED: "retry_scheduled", pb.DEAD: "dead"}


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _dt(ts: Timestamp | None) -> datetime | None:
    """A Timestamp as an aware UTC datetime (to the microsecond, as ToDatetime, at a third of its cost)."""
    if ts is None or (ts.seconds == 0 and ts.nanos == 0):
        return None
    return _EPOCH + timedelta(seconds=ts.seconds, microseconds=ts.nanos // 1000)


def _payload(raw: bytes) -> Any:
    """A leased payload: None when unset; ``{}`` (the most common, a fresh dict each time) without the decoder."""
    if not raw:
        return None
    return {} if raw == b"{}" else json.loads(raw)


class _Times:
    """_dt with a memo for one answer: a herd's executions share their due time, one Lease its lease end.
    A leased execution always has both times: an unset one is a broken answer (ValueError)."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[tuple[int, int], datetime] = {}

    def __call__(self, ts: Timestamp) -> datetime:
        key = (ts.seconds, ts.nanos)
        found = self._seen.get(key)
        if found is None:
            found = _dt(ts)
            if found is None:
                raise ValueError("a leased execution came without its scheduled or lease time")
            self._seen[key] = found
        return found


class WorkerClient:
    def __init__(self, addr: str | None = None, api_key: str | None = None) -> None:
        self.addr = addr or os.environ.get("KAIROS_GRPC_ADDR", DEFAULT_ADDR)
        key = api_key if api_key is not None else os.environ.get("KAIROS_API_KEY", "")
        self._metadata = (("authorization", f"Bearer {key}"),)
        self._channel = grpc.aio.insecure_channel(
            self.addr,
            options=[("grpc.keepalive_time_ms", 30_000), ("grpc.max_receive_message_length", 64 * 1024 * 1024)],
        )
        self._stub = pb_grpc.WorkerStub(self._channel)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> WorkerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def lease(
        self,
        pool: str,
        worker_id: str,
        max: int = 1,
        lease_seconds: float = 30,
        wait_seconds: float = 0,
        timeout: float | None = None,
    ) -> list[Execution]:
        response = await self._stub.Lease(
            pb.LeaseRequest(
                pool=pool, worker_id=worker_id, max=max, lease_seconds=lease_seconds, wait_seconds=wait_seconds
            ),
            metadata=self._metadata,
            timeout=timeout if timeout is not None else wait_seconds + 30,
        )
        times = _Times()
        return [
            Execution(
                execution_id=e.execution_id,
                job_id=e.job_id,
                attempt=e.attempt,
                payload=_payload(e.payload),
                scheduled_for=times(e.scheduled_for),
                lease_until=times(e.lease_until),
                idempotency_key=e.idempotency_key,
                max_attempts=e.max_attempts,
                timeout_seconds=e.timeout_seconds,
            )
            for e in response.executions
        ]

    async def heartbeat(
        self, execution_id: str, attempt: int, lease_seconds: float = 30, timeout: float = 10
    ) -> Answer:
        r = await self._stub.Heartbeat(
            pb.HeartbeatRequest(execution_id=execution_id, attempt=attempt, lease_seconds=lease_seconds),
            metadata=self._metadata,
            timeout=timeout,
        )
        return Answer(_OUTCOMES.get(r.outcome, "unknown"), _dt(r.lease_until), r.message)

    async def complete(self, execution_id: str, attempt: int, result: Any = None, timeout: float = 30) -> Answer:
        body = b"" if result is None else json.dumps(result, separators=(",", ":")).encode()
        r = await self._stub.Complete(
            pb.CompleteRequest(execution_id=execution_id, attempt=attempt, result=body),
            metadata=self._metadata,
            timeout=timeout,
        )
        return Answer(_OUTCOMES.get(r.outcome, "unknown"), None, r.message)

    async def fail(
        self, execution_id: str, attempt: int, error: str, retryable: bool = True, timeout: float = 30
    ) -> Answer:
        r = await self._stub.Fail(
            pb.FailRequest(execution_id=execution_id, attempt=attempt, error=error, retryable=retryable),
            metadata=self._metadata,
            timeout=timeout,
        )
        return Answer(_OUTCOMES.get(r.outcome, "unknown"), _dt(r.retry_at), r.message)

    async def complete_many(self, items: Sequence[tuple[str, int, Any]], timeout: float = 30) -> list[Answer]:
        """Complete (execution_id, attempt, result) items in one call; one Answer per item, in order."""
        request = pb.CompleteManyRequest(
            items=[
                pb.CompleteRequest(
                    execution_id=eid,
                    attempt=attempt,
                    result=b"" if result is None else json.dumps(result, separators=(",", ":")).encode(),
                )
                for eid, attempt, result in items
            ]
        )
        r = await self._stub.CompleteMany(request, metadata=self._metadata, timeout=timeout)
        return [Answer(_OUTCOMES.get(i.outcome, "unknown"), None, i.message) for i in r.results]

    async def fail_many(self, items: Sequence[tuple[str, int, str, bool]], timeout: float = 30) -> list[Answer]:
        """Fail (execution_id, attempt, error, retryable) items in one call; one Answer per item, in order."""
        request = pb.FailManyRequest(
            items=[
                pb.FailRequest(execution_id=eid, attempt=attempt, error=error, retryable=retryable)
                for eid, attempt, error, retryable in items
            ]
        )
        r = await self._stub.FailMany(request, metadata=self._metadata, timeout=timeout)
        return [
            Answer(_OUTCOMES.get(i.outcome, "unknown"), _dt(i.retry_at) if i.HasField("retry_at") else None, i.message)
            for i in r.results
        ]
