"""The gRPC Worker service: credentials -> queue, then the store's fenced statements.

This module and ``kairos_sdk.client`` are the only users of the generated modules, and this is
the one place Kairos errors become gRPC results: bad or missing credentials answer
UNAUTHENTICATED, a pool the credential does not cover PERMISSION_DENIED, malformed requests
INVALID_ARGUMENT, an unreachable database UNAVAILABLE. A stale attempt is not an error: it is
the LEASE_LOST outcome in the response.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias, TypeVar
from uuid import UUID

import grpc
from google.protobuf.timestamp_pb2 import Timestamp

from app import errors, observability
from app.domain import queues
from app.domain.limits import TokenBuckets
from app.domain.states import ExecutionState
from app.executor.batching import Outcomes
from app.executor.payloads import encode_payload, resolve_leased
from app.store import Database, tenants
from app.store import executions as ex
from app.store.payloads import PayloadStore
from kairos_sdk._proto import worker_pb2 as pb
from kairos_sdk._proto import worker_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")
if TYPE_CHECKING:
    Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]


@dataclass(frozen=True)
class ServicerConfig:
    # Resolved credentials are cached this long (a revoked key stops working within it).
    auth_cache_s: float = 5.0
    # Unknown keys are cached this long: a client repeating one costs one lookup per this long.
    auth_miss_cache_s: float = tenants.KEY_MISS_TTL_S_DEFAULT
    # Failed authentications per client address, as on the REST API (KAIROS_AUTH_FAILURE_LIMIT and
    # KAIROS_AUTH_FAILURE_WINDOW_S, docs/quotas.md); 0: no throttle.
    auth_failure_limit: int = 20
    auth_failure_window_s: float = 60.0
    # How often a waiting Lease looks for ready work (wake-ups come sooner).
    poll_interval_s: float = 0.25
    default_lease_s: float = 30.0
    max_lease_s: float = 3600.0
    max_wait_s: float = 60.0
    max_batch: int = 1000


@dataclass(frozen=True)
class Credential:
    principal: tenants.Principal

    def queue_for(self, ref: queues.PoolRef) -> str:
        """The ready queue ``ref`` names for this credential, or PermissionError."""
        p = self.principal
        if p.pool is not None:
            # A pool key serves its one shared pool. Its bare name is accepted as well (workers from
            # before the shared/ prefix): from such a key it cannot mean a tenant's own pool.
            if ref.name != p.pool:
                raise PermissionError(
                    f"this worker key serves shared pool {queues.shared_ref(p.pool)!r}, not {str(ref)!r}"
                )
            return queues.shared_queue(p.pool)
        if ref.shared:
            raise PermissionError(
                f"{str(ref)!r} is a shared pool, served by its own worker keys (kairos pools "
                "issue-key); a tenant key serves the tenant's own pools"
            )
        assert p.tenant_id is not None  # a key without a pool is a tenant's
        return queues.tenant_queue(p.tenant_id, ref.name)

    @property
    def scope(self) -> str:
        """Which executions Heartbeat/Complete/Fail may touch (see ExecutionCompleteMany)."""
        p = self.principal
        if p.pool is not None:
            return queues.shared_queue(p.pool)
        assert p.tenant_id is not None  # a key without a pool is a tenant's
        return queues.tenant_scope(p.tenant_id)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _ts(value: datetime | None) -> Timestamp | None:
    """An aware datetime as a Timestamp, exactly (to the microsecond), at half FromDatetime's cost."""
    if value is None:
        return None
    d = value - _EPOCH
    return Timestamp(seconds=d.days * 86_400 + d.seconds, nanos=d.microseconds * 1000)


class _Timestamps:
    """For one answer: each datetime met as (its idempotency-key form, its Timestamp), each made once."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        self._seen: dict[datetime, tuple[str, Timestamp | None]] = {}

    def __call__(self, value: datetime) -> tuple[str, Timestamp | None]:
        found = self._seen.get(value)
        if found is None:
            found = self._seen[value] = (ex.idempotency_time(value), _ts(value))
        return found


def _peer_host(peer: str | None) -> str:
    """The address in a gRPC peer string (``ipv4:10.0.0.7:5123``, ``ipv6:[::1]:5123``), without its port."""
    if not peer:
        return ""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0]
    if kind == "ipv6":
        return rest.rpartition(":")[0].strip("[]")
    return peer


def _is_uuid(value: str) -> bool:
    try:
        UUID(value)
    except ValueError:
        return False
    return True


_CANONICAL_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").fullmatch


def _canonical_id(value: str) -> str:
    """An execution id from a call as its canonical text, the form the lease handed out (a third of the cost
    of parsing a UUID); any other spelling UUID() reads (upper case, braces, no hyphens) is rewritten to it.
    ValueError when it is no UUID."""
    return value if _CANONICAL_ID(value) else str(UUID(value))


class WorkerServicer(pb_grpc.WorkerServicer):
    def __init__(
        self,
        db: Database,
        outcomes: Outcomes,
        config: ServicerConfig = ServicerConfig(),
        payloads: PayloadStore | None = None,
    ) -> None:
        self.db = db
        self.outcomes = outcomes
        self.config = config
        self.payloads = payloads  # reads the payloads kept in the object store (app.executor.payloads)
        self.stopping = asyncio.Event()
        self._ready = asyncio.Event()  # pulsed when local work becomes ready (a retry, a reaped lease)
        self._keys = tenants.KeyCache(config.auth_cache_s, miss_ttl_s=config.auth_miss_cache_s)
        self._auth_failures = TokenBuckets()

    def notify_ready(self, _count: int = 1) -> None:
        self._ready.set()
        self._ready = asyncio.Event()

    # -- auth ---------------------------------------------------------------------------------
    async def _credential(self, context: Context) -> Credential:
        header = ""
        for key, value in context.invocation_metadata() or ():
            if key == "authorization":
                header = value if isinstance(value, str) else value.decode()
        scheme, _, token = header.partition(" ")
        token = token.strip()
        client = _peer_host(context.peer())
        throttled = self._auth_wait_s(client) > 0
        if scheme.lower() != "bearer" or not token:
            await self._refuse(
                context, client, throttled, "send metadata 'authorization: Bearer <key>' (a tenant or pool worker key)"
            )
        # A throttled address's keys are looked up one at a time (after the key cache): its guesses cost
        # the database one lookup at a time, and a valid key still passes (docs/quotas.md).
        principal = await self._call(context, lambda: self._keys.resolve(self.db, token, queued=throttled))
        if principal is None:
            await self._refuse(context, client, throttled, "the key is unknown or revoked")
        return Credential(principal)

    def _auth_wait_s(self, client: str) -> float:
        limit = self.config.auth_failure_limit
        if not limit:
            return 0.0
        rate = limit / self.config.auth_failure_window_s
        return self._auth_failures.wait_s(client, limit, rate, time.monotonic())

    async def _refuse(self, context: Context, client: str, throttled: bool, message: str) -> NoReturn:
        """Abort a failed authentication: RESOURCE_EXHAUSTED with a retry hint (the message and a
        ``retry-after`` trailer, in seconds) while ``client`` is throttled, else UNAUTHENTICATED, counted."""
        if throttled:
            observability.auth_throttled.add(1)
            retry = max(1, math.ceil(self._auth_wait_s(client)))
            context.set_trailing_metadata((("retry-after", str(retry)),))
            await context.abort(
                grpc.StatusCode.RESOURCE_EXHAUSTED,
                f"too many failed authentications from this address; retry after {retry} s",
            )
        limit = self.config.auth_failure_limit
        if limit:
            left = self._auth_failures.spend(client, limit, limit / self.config.auth_failure_window_s, time.monotonic())
            if left < 1:
                log.warning(
                    "authentication throttled",
                    extra={
                        "client": client,
                        "limit": limit,
                        "window_s": self.config.auth_failure_window_s,
                        "transport": "grpc",
                    },
                )
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, message)

    async def _call(self, context: Context, fn: Callable[[], Awaitable[T]]) -> T:
        try:
            return await fn()
        except errors.DatabaseUnavailable as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"database unavailable: {exc.detail}")
        except errors.TransactionRetriesExhausted as exc:
            await context.abort(grpc.StatusCode.UNAVAILABLE, exc.detail)
        except errors.StoreConflict as exc:
            await context.abort(grpc.StatusCode.ABORTED, exc.detail)
        except errors.StoreRejected as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, exc.detail)
        except errors.StoreFailure as exc:
            await context.abort(grpc.StatusCode.INTERNAL, exc.detail)

    @staticmethod
    async def _execution_id(context: Context, value: str) -> str:
        try:
            return _canonical_id(value)
        except ValueError:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"execution_id {value!r} is not a UUID")
            raise AssertionError("unreachable") from None

    @staticmethod
    async def _error_texts(context: Context, texts: Sequence[str]) -> list[str]:
        """Reported errors as stored: "failed" when empty; a NUL in any refuses the call (PostgreSQL cannot keep it)."""
        if any("\x00" in text for text in texts):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "error must not contain the NUL character")
        return [text or "failed" for text in texts]

    async def _batch_ids(self, context: Context, items: Sequence[pb.CompleteRequest | pb.FailRequest]) -> list[str]:
        """The items' execution ids as canonical text: at most max_batch, each a UUID, none twice."""
        if len(items) > self.config.max_batch:
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"at most {self.config.max_batch} items per call, got {len(items)}"
            )
        try:
            ids = [_canonical_id(i.execution_id) for i in items]
        except ValueError:
            bad = next(i.execution_id for i in items if not _is_uuid(i.execution_id))
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"execution_id {bad!r} is not a UUID")
        if len(set(ids)) != len(ids):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "an execution_id appears twice in one call")
        return ids

    # -- RPCs ---------------------------------------------------------------------------------
    async def Lease(self, request: pb.LeaseRequest, context: Context) -> pb.LeaseResponse:
        cred = await self._credential(context)
        ref = queues.parse_pool_ref(request.pool)
        if ref is None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, queues.POOL_REF_HELP)
        try:
            queue = cred.queue_for(ref)
        except PermissionError as exc:
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(exc))
        limit = max(1, min(request.max or 1, self.config.max_batch))
        lease_s = request.lease_seconds or self.config.default_lease_s
        lease_s = max(1.0, min(lease_s, self.config.max_lease_s))
        wait_s = max(0.0, min(request.wait_seconds, self.config.max_wait_s))
        worker_id = (request.worker_id or context.peer() or "worker")[:200]
        if "\x00" in worker_id:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "worker_id must not contain the NUL character")
        deadline = time.monotonic() + wait_s
        while True:
            ready = self._ready
            got = await self._call(
                context, lambda: self.db.statement(lambda tx: tx.executions.lease(queue, worker_id, limit, lease_s))
            )
            if got and any(e.payload_ref is not None for e in got):  # only rows whose payload is by reference
                got = await resolve_leased(self.payloads, got, self.outcomes)
            remaining = deadline - time.monotonic()
            if got or remaining <= 0 or self.stopping.is_set():
                break
            # Work dispatched ahead is ready at its due time: wake for it then, not at the next poll.
            # (Due already but not leased means quotas or other leasers hold it: poll as usual.)
            due_in = await self._call(context, lambda: self.db.statement(lambda tx: tx.executions.next_ready_in(queue)))
            pause_s = min(self.config.poll_interval_s, remaining)
            if due_in is not None and due_in > 0:
                pause_s = min(pause_s, due_in)
            waits = [asyncio.ensure_future(ready.wait()), asyncio.ensure_future(self.stopping.wait())]
            try:
                await asyncio.wait(waits, timeout=pause_s, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        if got:
            observability.leased.add(len(got), {"queue": "shared" if queues.is_shared(queue) else "tenant"})
            self.outcomes.track(got, lease_s, queue)
        response = pb.LeaseResponse()
        add = response.executions.add
        times = _Timestamps()  # a herd's executions share their due time, one lease its end
        for e in got:
            job_id = e.job_id
            when, scheduled_for = times(e.scheduled_for)
            add(
                execution_id=e.execution_id,
                job_id=job_id,
                attempt=e.attempt,
                payload=b"{}" if e.payload == {} else encode_payload(e.payload),
                idempotency_key=f"{job_id}:{when}",
                max_attempts=e.max_attempts,
                timeout_seconds=e.timeout_s,
                scheduled_for=scheduled_for,
                lease_until=times(e.lease_until)[1],
            )
        return response

    async def Heartbeat(self, request: pb.HeartbeatRequest, context: Context) -> pb.HeartbeatResponse:
        cred = await self._credential(context)
        eid = await self._execution_id(context, request.execution_id)
        lease_s = max(1.0, min(request.lease_seconds or self.config.default_lease_s, self.config.max_lease_s))
        until = await self._call(
            context,
            lambda: self.db.statement(
                lambda tx: tx.executions.heartbeat(
                    eid, request.attempt, lease_s, scope=cred.scope, scheduled_for=self.outcomes.scheduled_for(eid)
                )
            ),
        )
        if until is None:
            observability.lease_lost.add(1, {"call": "heartbeat"})
            return pb.HeartbeatResponse(
                outcome=pb.LEASE_LOST,
                message=("attempt is not current: the execution was re-leased, cancelled, finished or timed out"),
            )
        return pb.HeartbeatResponse(outcome=pb.OK, lease_until=_ts(until))

    async def Complete(self, request: pb.CompleteRequest, context: Context) -> pb.CompleteResponse:
        cred = await self._credential(context)
        eid = await self._execution_id(context, request.execution_id)
        result = None
        if request.result:
            try:
                result = json.loads(request.result)
            except ValueError:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "result must be UTF-8 JSON")
        ok = await self._call(
            context, lambda: self.outcomes.complete(ex.Success(eid, request.attempt, result, scope=cred.scope))
        )
        if not ok:
            return pb.CompleteResponse(
                outcome=pb.LEASE_LOST, message="attempt is not current: its result was recorded as discarded"
            )
        return pb.CompleteResponse(outcome=pb.OK)

    async def Fail(self, request: pb.FailRequest, context: Context) -> pb.FailResponse:
        cred = await self._credential(context)
        eid = await self._execution_id(context, request.execution_id)
        [error] = await self._error_texts(context, [request.error])
        out = await self._call(
            context,
            lambda: self.outcomes.fail(
                ex.Failure(eid, request.attempt, error, retryable=request.retryable, scope=cred.scope)
            ),
        )
        if out.state is None:
            return pb.FailResponse(
                outcome=pb.LEASE_LOST, message="attempt is not current: its error was recorded as discarded"
            )
        if out.state == ExecutionState.DEAD:
            return pb.FailResponse(outcome=pb.DEAD, message="no attempts left or not retryable: dead letter")
        return pb.FailResponse(outcome=pb.RETRY_SCHEDULED, retry_at=_ts(out.retry_at))

    async def CompleteMany(self, request: pb.CompleteManyRequest, context: Context) -> pb.CompleteManyResponse:
        cred = await self._credential(context)
        ids = await self._batch_ids(context, request.items)
        done = []
        for item, eid in zip(request.items, ids, strict=True):
            result = None
            if item.result:
                try:
                    result = json.loads(item.result)
                except ValueError:
                    await context.abort(
                        grpc.StatusCode.INVALID_ARGUMENT, f"result of {item.execution_id} must be UTF-8 JSON"
                    )
            done.append(ex.Success(eid, item.attempt, result, scope=cred.scope))
        oks = await self._call(context, lambda: self.outcomes.complete_batch(done))
        return pb.CompleteManyResponse(
            results=[
                pb.CompleteManyItem(execution_id=item.execution_id, attempt=item.attempt, outcome=pb.OK)
                if ok
                else pb.CompleteManyItem(
                    execution_id=item.execution_id,
                    attempt=item.attempt,
                    outcome=pb.LEASE_LOST,
                    message="attempt is not current: its result was recorded as discarded",
                )
                for item, ok in zip(request.items, oks, strict=True)
            ]
        )

    async def FailMany(self, request: pb.FailManyRequest, context: Context) -> pb.FailManyResponse:
        cred = await self._credential(context)
        ids = await self._batch_ids(context, request.items)
        texts = await self._error_texts(context, [item.error for item in request.items])
        failed = [
            ex.Failure(eid, item.attempt, text, retryable=item.retryable, scope=cred.scope)
            for item, eid, text in zip(request.items, ids, texts, strict=True)
        ]
        outs = await self._call(context, lambda: self.outcomes.fail_batch(failed))
        results = []
        for item, out in zip(request.items, outs, strict=True):
            r = pb.FailManyItem(execution_id=item.execution_id, attempt=item.attempt)
            if out.state is None:
                r.outcome, r.message = pb.LEASE_LOST, "attempt is not current: its error was recorded as discarded"
            elif out.state == ExecutionState.DEAD:
                r.outcome, r.message = pb.DEAD, "no attempts left or not retryable: dead letter"
            else:
                r.outcome = pb.RETRY_SCHEDULED
                if out.retry_at is not None:  # always set on a retry
                    r.retry_at.FromDatetime(out.retry_at)
            results.append(r)
        return pb.FailManyResponse(results=results)
