"""The built-in pool for http targets (queue '@http'), consumed by the executor itself.

Each leased execution is POSTed as JSON to its target URL with an Idempotency-Key of
``{jobId}:{scheduledFor}`` (the same for every attempt), the attempt number and an HMAC
signature. 2xx completes; 408, 429, 5xx, connection errors and timeouts retry with backoff;
any other status dead-letters at once (the request can never succeed). A per-(tenant, origin) circuit
breaker defers executions without spending attempts while an origin is failing, and the
egress policy refuses private addresses before anything is sent.

Concurrency is bounded per executor (``concurrency``) and per origin (``per_origin``); one
``httpx.AsyncClient`` keeps connections alive between deliveries.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from dataclasses import dataclass, field

import httpx

from app import observability
from app.domain.queues import HTTP_QUEUE
from app.duties import pause
from app.errors import EgressRefused
from app.executor.batching import Deferral, Outcomes
from app.executor.breaker import BreakerConfig, Breakers
from app.executor.egress import EgressPolicy
from app.executor.payloads import resolve_leased
from app.executor.signing import sign
from app.observability import tracing
from app.store import Database
from app.store import executions as ex
from app.store.payloads import PayloadStore

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 429})
# The lease of an HTTP delivery is the job's timeout (the lease statement caps it there).
_LEASE_AS_LONG_AS_THE_TIMEOUT_S = 86400.0


def _default_worker_id() -> str:
    return f"executor@{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class HttpPoolConfig:
    # Deliveries in flight per executor.
    concurrency: int = 64
    # Deliveries in flight per origin (scheme://host:port).
    per_origin: int = 16
    # Executions leased per statement.
    batch: int = 64
    # How often an idle pool looks for ready work (wake-ups come sooner).
    poll_interval_s: float = 0.5
    # Answer bytes kept in the error of a failed delivery.
    error_body_bytes: int = 512
    worker_id: str = field(default_factory=_default_worker_id)
    breaker: BreakerConfig = BreakerConfig()
    isolation: str = "READ COMMITTED"


@dataclass(frozen=True)
class Verdict:
    outcome: str  # succeeded | retry | dead | deferred
    detail: str = ""


class HttpPool:
    def __init__(self, db: Database, outcomes: Outcomes, config: HttpPoolConfig = HttpPoolConfig(), *,
                 egress: EgressPolicy = EgressPolicy(), breakers: Breakers | None = None,
                 transport: httpx.AsyncBaseTransport | None = None, payloads: PayloadStore | None = None) -> None:
        self.db = db
        self.payloads = payloads  # reads the payloads kept in the object store (app.executor.payloads)
        self.outcomes = outcomes
        self.config = config
        self.egress = egress
        self.breakers = breakers or Breakers(config.breaker)
        self.client = httpx.AsyncClient(
            transport=transport, follow_redirects=False, trust_env=False,
            limits=httpx.Limits(max_connections=config.concurrency, max_keepalive_connections=config.concurrency),
        )
        self.wake = asyncio.Event()
        self._inflight: set[asyncio.Task[Verdict]] = set()
        self._held: dict[asyncio.Task[Verdict], ex.Leased] = {}
        self._per_origin: dict[str, asyncio.Semaphore] = {}
        self._slot_freed = asyncio.Event()

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    async def lease_batch(self) -> list[ex.Leased]:
        """Lease what fits in the free slots and start delivering it."""
        free = self.config.concurrency - len(self._inflight)
        if free <= 0:
            return []
        got = await self.db.transaction(
            lambda tx: tx.executions.lease(HTTP_QUEUE, self.config.worker_id, min(free, self.config.batch),
                               _LEASE_AS_LONG_AS_THE_TIMEOUT_S),
            isolation=self.config.isolation)
        if got:
            observability.leased.add(len(got), {"queue": observability.queue_kind(HTTP_QUEUE)})
            self.outcomes.track(got, _LEASE_AS_LONG_AS_THE_TIMEOUT_S, HTTP_QUEUE)
        for item in got:
            task = asyncio.create_task(self.deliver(item), name=f"http-deliver-{item.execution_id}")
            self._inflight.add(task)
            self._held[task] = item
            task.add_done_callback(self._done)
        return got

    def _done(self, task: asyncio.Task[Verdict]) -> None:
        self._inflight.discard(task)
        self._held.pop(task, None)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            log.error("delivery crashed", exc_info=task.exception())

    async def run_once(self) -> list[ex.Leased]:
        """Lease one batch and wait until every delivery of it has an outcome (tests, benchmarks)."""
        tasks_before = set(self._inflight)
        got = await self.lease_batch()
        new = [t for t in self._inflight if t not in tasks_before]
        if new:
            await asyncio.gather(*new, return_exceptions=True)
        return got

    async def run(self, stop: asyncio.Event) -> None:
        # Not app.duties.run_every: what may cut the pause short depends on the pass (a freed slot
        # only while every slot is busy; an idle pool woken per finished delivery would poll per
        # completion).
        while not stop.is_set():
            try:
                got = await self.lease_batch()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("http pool lease failed")
                got = []
            if got and len(self._inflight) < self.config.concurrency:
                continue  # there may be more ready right now
            self.wake.clear()
            self._slot_freed.clear()
            full = len(self._inflight) >= self.config.concurrency
            await pause(self.config.poll_interval_s, stop, self.wake, *([self._slot_freed] if full else []))

    async def close(self, grace_s: float = 5.0) -> None:
        """Let deliveries in flight finish for ``grace_s``; hand back the rest unspent."""
        if self._inflight:
            await asyncio.wait(set(self._inflight), timeout=grace_s)
        left = [self._held[t] for t in list(self._inflight) if t in self._held]
        for task in list(self._inflight):
            task.cancel()
        if left:
            refs = [ex.AttemptRef(i.execution_id, i.attempt) for i in left]
            try:
                await self.db.transaction(lambda tx: tx.executions.defer_many(refs, [0.0] * len(refs)))
            except Exception:
                log.exception("could not hand back deliveries in flight; their leases will expire")
            log.info("handed back deliveries in flight", extra={"count": len(left)})
        await self.client.aclose()

    def _origin_slot(self, origin: str) -> asyncio.Semaphore:
        sem = self._per_origin.get(origin)
        if sem is None:
            sem = self._per_origin[origin] = asyncio.Semaphore(self.config.per_origin)
        return sem

    async def deliver(self, item: ex.Leased) -> Verdict:
        if item.payload_ref is not None:  # the job's payload is in the object store: read it first
            resolved = await resolve_leased(self.payloads, [item], self.outcomes)
            if not resolved:
                return Verdict("retry", "payload unavailable")  # its attempt already failed, saying why
            item = resolved[0]
        verdict = await self._attempt(item)
        if verdict.outcome == "succeeded":
            await self.outcomes.complete(ex.Success(item.execution_id, item.attempt, {"status": int(verdict.detail)}))
        elif verdict.outcome == "deferred":
            await self.outcomes.defer(Deferral(item.execution_id, item.attempt, float(verdict.detail)))
        else:
            await self.outcomes.fail(ex.Failure(item.execution_id, item.attempt, verdict.detail,
                                                retryable=verdict.outcome == "retry"))
        log.debug("delivered", extra={"execution_id": str(item.execution_id), "attempt": item.attempt,
                                      "outcome": verdict.outcome})
        return verdict

    async def _attempt(self, item: ex.Leased) -> Verdict:
        try:
            url = httpx.URL(item.target_ref)
            host = url.host
            port = url.port or (443 if url.scheme == "https" else 80)
        except (httpx.InvalidURL, TypeError) as exc:
            return Verdict("dead", f"invalid target URL: {exc}")
        if url.scheme not in ("http", "https") or not host:
            return Verdict("dead", "target is not an absolute http(s) URL")
        origin = f"{url.scheme}://{host}:{port}"
        circuit = (item.tenant_id, origin)  # one tenant's failing endpoint never opens another's circuit
        defer_s = self.breakers.allow(circuit)
        if defer_s is not None:
            return Verdict("deferred", str(defer_s))
        try:
            address = await self.egress.resolve(host, port)
        except EgressRefused as exc:
            self.breakers.record_success(circuit)  # never a probe's failure: nothing was sent
            return Verdict("dead", exc.detail)
        # GET carries no body (the signature then covers the empty body); the others carry the payload.
        method = item.http_method
        body = b"" if method == "GET" else json.dumps(item.payload, separators=(",", ":")).encode()
        scheduled = item.scheduled_for.isoformat().replace("+00:00", "Z")
        headers = {
            # The job's static headers first: the delivery's own headers below always win.
            **(item.http_headers or {}),
            "Content-Type": "application/json",
            "User-Agent": "Kairos/1",
            "Host": url.netloc.decode("ascii"),
            "Idempotency-Key": item.idempotency_key,
            "Kairos-Job-Id": str(item.job_id),
            "Kairos-Execution-Id": str(item.execution_id),
            "Kairos-Attempt": str(item.attempt),
            "Kairos-Scheduled-For": scheduled,
            "Kairos-Signature": sign(item.signing_secret, body),
        }
        # Connect to the address the egress policy checked (no second DNS answer can differ).
        pinned = url.copy_with(host=str(address))
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        timeout = max(0.5, item.timeout_s - 0.5)
        async with self._origin_slot(origin):
            try:
                with tracing.span("kairos.deliver", parent=item.traceparent, attributes={
                        "kairos.job_id": str(item.job_id), "kairos.execution_id": str(item.execution_id),
                        "kairos.attempt": item.attempt, "http.request.method": method}) as traceparent:
                    # The occurrence's trace goes to the target: its own spans join it.
                    headers["traceparent"] = traceparent or tracing.child_of(item.traceparent)
                    response = await self.client.request(method, pinned, content=body or None, headers=headers,
                                                         timeout=timeout, extensions=extensions)
            except httpx.TimeoutException:
                self.breakers.record_failure(circuit)
                return Verdict("retry", f"timed out after {timeout:g}s")
            except httpx.HTTPError as exc:
                self.breakers.record_failure(circuit)
                return Verdict("retry", f"connection error: {type(exc).__name__}: {exc}")
        status = response.status_code
        if 200 <= status < 300:
            self.breakers.record_success(circuit)
            return Verdict("succeeded", str(status))
        snippet = response.content[: self.config.error_body_bytes].decode("utf-8", "replace")
        detail = f"HTTP {status}: {snippet}".strip()
        if status in RETRYABLE_STATUS or status >= 500:
            self.breakers.record_failure(circuit)
            return Verdict("retry", detail)
        self.breakers.record_success(circuit)  # the origin answers; this request never will
        return Verdict("dead", detail)
