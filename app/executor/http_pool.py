"""The built-in pool for http targets (queue '@http'), consumed by the executor itself.

Each leased execution is sent to its target URL with an Idempotency-Key of ``{jobId}:{scheduledFor}``
(the same for every attempt), the attempt number and an HMAC signature. 2xx completes; 408, 429, 5xx,
connection errors, timeouts and names that do not resolve retry with backoff; any other status
dead-letters at once (the request can never succeed), and so does a target the egress policy refuses.
A failed delivery keeps at most ``error_body_bytes`` of the answer in its error.

Slots. A request in flight holds one of the executor's ``concurrency`` slots; at most ``per_origin``
of one circuit (tenant, origin) and ``per_tenant`` of one tenant are in flight at once. A leased
delivery that cannot start yet waits in this process holding no slot, so one tenant's slow target
never keeps another tenant's deliveries from starting; a tenant with ``per_origin`` or more deliveries
waiting is not leased more (``ExecutionLeaseFair``'s ``skip_tenants``) until they drain, so its backlog stays in
the queue rather than in leases.

Breakers. A per-(tenant, origin) circuit breaker (``app.executor.breaker``) decides at the moment a
request would leave: a circuit that starts failing narrows, an open one sends nothing and its leased
executions (waiting or newly leased) are deferred until the cool-down ends, their attempt refunded.

Leases. Deliveries are leased for ``lease_s`` (KAIROS_HTTP_LEASE_S), not for the job's timeout, and
renewed every third of it while they run or wait (a waiting delivery's attempt clock restarts: it has
not started), so when an executor dies another retries its deliveries within seconds.

One ``httpx.AsyncClient`` keeps connections alive between deliveries; every request connects to the
address the egress policy checked.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import socket
import time
from collections import Counter, deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from app import observability
from app.domain.egress import IPAddress
from app.domain.queues import HTTP_QUEUE
from app.duties import pause
from app.errors import EgressRefused, TargetUnresolved
from app.executor.batching import Coalescer, Deferral, Outcomes
from app.executor.breaker import BreakerConfig, Breakers, Key
from app.executor.egress import EgressPolicy, resolve
from app.executor.payloads import resolve_leased
from app.executor.signing import sign
from app.observability import tracing
from app.store import Database
from app.store import executions as ex
from app.store.payloads import PayloadStore

log = logging.getLogger(__name__)

RETRYABLE_STATUS = frozenset({408, 429})
HTTP_LEASE_S_DEFAULT = 15.0
ERROR_BODY_BYTES_DEFAULT = 512
# A request must end this long before its lease can no longer be renewed (started_at + the job's timeout).
_TIMEOUT_MARGIN_S = 0.5


def _default_worker_id() -> str:
    return f"executor@{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class HttpPoolConfig:
    # Requests in flight per executor.
    concurrency: int = 64
    # Requests in flight per (tenant, origin) circuit; also how many deliveries a tenant may have waiting
    # for a slot before it is leased no more.
    per_origin: int = 16
    # Requests in flight per tenant, all origins together (None: half of ``concurrency``, at least 1).
    per_tenant: int | None = None
    # Executions leased per statement.
    batch: int = 64
    # How often an idle pool looks for ready work (wake-ups come sooner).
    poll_interval_s: float = 0.5
    # Lease of a delivery, renewed every third of it while the delivery is held (never past its timeout).
    lease_s: float = HTTP_LEASE_S_DEFAULT
    # Answer bytes kept in the error of a failed delivery.
    error_body_bytes: int = ERROR_BODY_BYTES_DEFAULT
    worker_id: str = field(default_factory=_default_worker_id)
    breaker: BreakerConfig = BreakerConfig()
    isolation: str = "READ COMMITTED"

    def __post_init__(self) -> None:
        if min(self.concurrency, self.per_origin, self.batch) < 1 or self.lease_s <= 0:
            raise ValueError("concurrency, per_origin and batch must be >= 1 and lease_s > 0")

    @property
    def tenant_slots(self) -> int:
        return self.per_tenant if self.per_tenant is not None else max(1, self.concurrency // 2)

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / 3


@dataclass(frozen=True)
class Verdict:
    outcome: str  # succeeded | retry | dead | deferred
    detail: str = ""


@dataclass(eq=False)
class _Held:
    """A delivery this pool holds the lease of, from the lease to its outcome."""

    item: ex.Leased
    key: Key | None  # (tenant, origin); None when the URL is unusable (dead without sending)
    # Monotonic time by which the request must be over: the attempt's start (read before the statement
    # that set it, so never later than the database's) + the job's timeout.
    deadline: float
    waiting: bool = False  # leased but not started: no slot held
    sending: bool = False  # holds a slot (of the executor, its circuit and its tenant)

    @property
    def ref(self) -> ex.AttemptRef:
        return ex.AttemptRef(self.item.execution_id, self.item.attempt)


def _origin(item: ex.Leased) -> tuple[Key, httpx.URL, str, int] | Verdict:
    """(circuit, URL, host, port), or the verdict of a target that can never be delivered to."""
    try:
        url = httpx.URL(item.target_ref)
        host = url.host
        port = url.port or (443 if url.scheme == "https" else 80)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        return Verdict("dead", f"invalid target URL: {exc}")
    if url.scheme not in ("http", "https") or not host:
        return Verdict("dead", "target is not an absolute http(s) URL")
    return (item.tenant_id, f"{url.scheme}://{host}:{port}"), url, host, port


def _excerpt(raw: bytes, limit: int, encoding: str | None) -> str:
    """At most ``limit`` bytes of an answer as text the database can hold (no NUL, no control characters)."""
    if encoding and encoding.lower() != "identity":
        return f"[{encoding}-encoded body not shown]"
    text = raw[:limit].decode("utf-8", "replace")
    return "".join(c if c.isprintable() or c in "\t\n" else "\ufffd" for c in text)


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
        self._held: dict[str, _Held] = {}  # by execution id
        self._waiting: dict[Key, deque[_Held]] = {}
        self._sending = 0
        self._sending_by_key: Counter[Key] = Counter()
        self._sending_by_tenant: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self._slot_freed = asyncio.Event()
        self._released = asyncio.Event()  # a held delivery was let go (run_once waits on it)
        self._restarter: Coalescer[_Held, bool] = Coalescer("http-restart", self._restart_flush)

    @property
    def inflight(self) -> int:
        """Requests in flight (each holds a slot)."""
        return self._sending

    @property
    def held(self) -> int:
        """Deliveries leased by this pool and not settled yet (in flight or waiting for a slot)."""
        return len(self._held)

    def waiting_by_tenant(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for (tenant, _), queue in self._waiting.items():
            counts[tenant] += len(queue)
        return counts

    # -- leasing and slots -------------------------------------------------------------------------

    async def lease_batch(self) -> list[ex.Leased]:
        """Lease what fits in the free slots, then start or queue each delivery."""
        free = self.config.concurrency - self._sending
        if free <= 0:
            return []
        skip = [t for t, n in self.waiting_by_tenant().items() if n >= self.config.per_origin]
        began = time.monotonic()
        got = await self.db.statement(
            lambda tx: tx.executions.lease(HTTP_QUEUE, self.config.worker_id, min(free, self.config.batch),
                                           self.config.lease_s, skip_tenants=skip))
        if got:
            observability.leased.add(len(got), {"queue": observability.queue_kind(HTTP_QUEUE)})
            self.outcomes.track(got, self.config.lease_s, HTTP_QUEUE)
        for item in got:
            origin = _origin(item)
            entry = _Held(item, None if isinstance(origin, Verdict) else origin[0], began + item.timeout_s)
            self._held[item.execution_id] = entry
            if isinstance(origin, Verdict):
                self._spawn(self._settle(entry, origin), item)
            else:
                self._admit(entry)
        return got

    def _can_start(self, key: Key) -> bool:
        return (self._sending < self.config.concurrency
                and self._sending_by_key[key] < self.breakers.limit(key, self.config.per_origin)
                and self._sending_by_tenant[key[0]] < self.config.tenant_slots)

    def _admit(self, entry: _Held) -> None:
        """Start a delivery now, defer it (its circuit is open) or queue it for a slot."""
        assert entry.key is not None
        if (left := self.breakers.open_for(entry.key)) is not None:
            self._defer(entry, left)
        elif self._waiting.get(entry.key) is None and self._can_start(entry.key):
            self._start(entry)
        else:
            entry.waiting = True
            self._waiting.setdefault(entry.key, deque()).append(entry)

    def _pump(self) -> None:
        """Give free slots to waiting deliveries, circuit by circuit; defer those of circuits now open."""
        for key in list(self._waiting):
            queue = self._waiting[key]
            if (left := self.breakers.open_for(key)) is not None:
                while queue:
                    self._defer(queue.popleft(), left)
            while queue and self._can_start(key):
                self._start(queue.popleft())
            if not queue:
                del self._waiting[key]
            else:  # the circuit keeps its place behind the others: slots go round
                self._waiting[key] = self._waiting.pop(key)

    def _start(self, entry: _Held) -> None:
        assert entry.key is not None
        restart, entry.waiting, entry.sending = entry.waiting, False, True
        self._sending += 1
        self._sending_by_key[entry.key] += 1
        self._sending_by_tenant[entry.key[0]] += 1
        self.breakers.sending(entry.key)
        self._spawn(self._deliver(entry, restart=restart), entry.item)

    def _free_slot(self, entry: _Held) -> None:
        if not entry.sending:
            return
        assert entry.key is not None
        entry.sending = False
        self._sending -= 1
        self._sending_by_key[entry.key] -= 1
        self._sending_by_tenant[entry.key[0]] -= 1
        if self._sending_by_key[entry.key] <= 0:
            del self._sending_by_key[entry.key]
        if self._sending_by_tenant[entry.key[0]] <= 0:
            del self._sending_by_tenant[entry.key[0]]
        self._slot_freed.set()

    def _defer(self, entry: _Held, delay_s: float) -> None:
        entry.waiting = False
        self._spawn(self._settle(entry, Verdict("deferred", f"{delay_s:.3f}")), entry.item)

    def _spawn(self, work: Coroutine[Any, Any, None], item: ex.Leased) -> None:
        task = asyncio.create_task(work, name=f"http-deliver-{item.execution_id}")
        self._tasks.add(task)
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("delivery crashed", exc_info=task.exception())

    def _let_go(self, entry: _Held) -> None:
        """The delivery is settled (or lost): free its slot, forget it, hand its slot on."""
        self._free_slot(entry)
        if self._held.get(entry.item.execution_id) is entry:
            del self._held[entry.item.execution_id]
        self._released.set()
        self._pump()

    # -- the loops -----------------------------------------------------------------------------------

    async def run_once(self) -> list[ex.Leased]:
        """Lease one batch and wait until every delivery of it has an outcome (tests, benchmarks)."""
        got = await self.lease_batch()
        ids = {item.execution_id for item in got}
        while ids & self._held.keys():
            self._released.clear()
            await self._released.wait()
        return got

    async def run(self, stop: asyncio.Event) -> None:
        for entry, why in await self._allow_list_warnings():
            log.warning("egress allow-list entry matches nothing plausible", extra={"entry": entry, "why": why})
        renewer = asyncio.create_task(self._renew_loop(stop), name="http-lease-renewer")
        try:
            await self._lease_loop(stop)
        finally:
            renewer.cancel()
            await asyncio.gather(renewer, return_exceptions=True)

    async def _allow_list_warnings(self) -> list[tuple[str, str]]:
        from app.executor.egress import allow_list_warnings

        try:
            return await allow_list_warnings(self.egress)
        except Exception:
            log.exception("could not check the egress allow list")
            return []

    async def _lease_loop(self, stop: asyncio.Event) -> None:
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
            if got and self._sending < self.config.concurrency:
                continue  # there may be more ready right now
            self.wake.clear()
            self._slot_freed.clear()
            full = self._sending >= self.config.concurrency
            await pause(self.config.poll_interval_s, stop, self.wake, *([self._slot_freed] if full else []))

    async def _renew_loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            await pause(self.config.renew_every_s, stop)
            if stop.is_set():
                return
            try:
                await self.renew_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("http pool lease renewal failed; retrying", extra={"held": len(self._held)})

    async def renew_once(self) -> int:
        """Renew the lease of every held delivery (restarting the clock of those still waiting); a waiting
        delivery whose lease was lost is dropped unsent. Returns how many were renewed."""
        entries = [e for e in self._held.values() if e.waiting or e.sending]
        if not entries:
            return 0
        began = time.monotonic()
        renewals = [ex.Renewal(e.item.execution_id, e.item.attempt, restart=e.waiting) for e in entries]
        renewed = await self.db.transaction(
            lambda tx: tx.executions.renew_many(renewals, self.config.worker_id, self.config.lease_s),
            isolation=self.config.isolation)
        for entry, renewal in zip(entries, renewals, strict=True):
            if entry.item.execution_id in renewed:
                if renewal.restart and entry.waiting:
                    entry.deadline = began + entry.item.timeout_s
            elif entry.waiting and entry.key is not None:
                self._waiting[entry.key].remove(entry)
                if not self._waiting[entry.key]:
                    del self._waiting[entry.key]
                entry.waiting = False
                log.info("execution outcome", extra={"execution_id": entry.item.execution_id,
                                                     "attempt": entry.item.attempt, "outcome": "lease_lost"})
                self._let_go(entry)
        return len(renewed)

    async def _restart_flush(self, entries: Sequence[_Held]) -> list[bool]:
        """Restart the attempt clock of deliveries that waited for a slot, as they start."""
        began = time.monotonic()
        renewals = [ex.Renewal(e.item.execution_id, e.item.attempt, restart=True) for e in entries]
        renewed = await self.db.transaction(
            lambda tx: tx.executions.renew_many(renewals, self.config.worker_id, self.config.lease_s),
            isolation=self.config.isolation)
        for entry in entries:
            if entry.item.execution_id in renewed:
                entry.deadline = began + entry.item.timeout_s
        return [e.item.execution_id in renewed for e in entries]

    async def close(self, grace_s: float = 5.0) -> None:
        """Let requests in flight finish for ``grace_s``; hand back the rest, and every waiting delivery, unspent."""
        waiting = [e for q in self._waiting.values() for e in q]
        self._waiting.clear()
        for entry in waiting:
            entry.waiting = False
            self._held.pop(entry.item.execution_id, None)
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=grace_s)
        left = waiting + [e for e in self._held.values() if e.sending]
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if left:
            refs = [e.ref for e in left]
            try:
                await self.db.transaction(lambda tx: tx.executions.defer_many(refs, [0.0] * len(refs)))
            except Exception:
                log.exception("could not hand back deliveries; their leases will expire")
            log.info("handed back deliveries", extra={"count": len(left)})
        await self.client.aclose()

    # -- one delivery --------------------------------------------------------------------------------

    async def _deliver(self, entry: _Held, *, restart: bool) -> None:
        try:
            if restart and not await self._restarter.submit(entry):
                log.info("execution outcome", extra={"execution_id": entry.item.execution_id,
                                                     "attempt": entry.item.attempt, "outcome": "lease_lost"})
                return
            item = entry.item
            if item.payload_ref is not None:  # the job's payload is in the object store: read it first
                resolved = await resolve_leased(self.payloads, [item], self.outcomes)
                if not resolved:
                    return  # its attempt already failed, saying why
                item = resolved[0]
            verdict = await self._attempt(entry, item)
            await self._report(item, verdict)
        finally:
            self._let_go(entry)

    async def _settle(self, entry: _Held, verdict: Verdict) -> None:
        try:
            await self._report(entry.item, verdict)
        finally:
            self._let_go(entry)

    async def _report(self, item: ex.Leased, verdict: Verdict) -> None:
        if verdict.outcome == "succeeded":
            await self.outcomes.complete(ex.Success(item.execution_id, item.attempt, {"status": int(verdict.detail)}))
        elif verdict.outcome == "deferred":
            # Jittered, so deliveries deferred together do not all come back in the same instant.
            delay = float(verdict.detail) * random.uniform(1.0, 1.2)
            await self.outcomes.defer(Deferral(item.execution_id, item.attempt, delay))
        else:
            await self.outcomes.fail(ex.Failure(item.execution_id, item.attempt, verdict.detail,
                                                retryable=verdict.outcome == "retry"))
        log.debug("delivered", extra={"execution_id": item.execution_id, "attempt": item.attempt,
                                      "outcome": verdict.outcome})

    async def _attempt(self, entry: _Held, item: ex.Leased) -> Verdict:
        parsed = _origin(item)
        if isinstance(parsed, Verdict):
            return parsed
        circuit, url, host, port = parsed
        try:
            address: IPAddress = await resolve(self.egress, host, port)
        except EgressRefused as exc:
            self.breakers.abandon(circuit)  # nothing was sent: no news of the origin
            log.warning("delivery refused by the egress policy", extra={
                "execution_id": item.execution_id, "tenant_id": item.tenant_id, "host": host})
            return Verdict("dead", exc.detail)
        except TargetUnresolved as exc:
            self.breakers.record_failure(circuit)
            return Verdict("retry", exc.detail)
        timeout = entry.deadline - _TIMEOUT_MARGIN_S - time.monotonic()
        if timeout <= 0:
            self.breakers.abandon(circuit)
            return Verdict("retry", "timed out before the request could be sent")
        # GET carries no body (the signature then covers the empty body); the others carry the payload.
        method = item.http_method
        body = b"" if method == "GET" else json.dumps(item.payload, separators=(",", ":")).encode()
        scheduled = item.scheduled_for.isoformat().replace("+00:00", "Z")
        headers = {
            # The job's static headers first: the delivery's own headers below always win.
            **(item.http_headers or {}),
            "Content-Type": "application/json",
            "User-Agent": "Kairos/1",
            "Accept-Encoding": "identity",  # the excerpt of a failure's answer is read as it comes
            "Host": url.netloc.decode("ascii"),
            "Idempotency-Key": item.idempotency_key,
            "Kairos-Job-Id": item.job_id,
            "Kairos-Execution-Id": item.execution_id,
            "Kairos-Attempt": str(item.attempt),
            "Kairos-Scheduled-For": scheduled,
            "Kairos-Signature": sign(item.signing_secret, body),
        }
        # Connect to the address the egress policy checked (no second DNS answer can differ).
        pinned = url.copy_with(host=str(address))
        extensions = {"sni_hostname": host} if url.scheme == "https" else {}
        try:
            with tracing.span("kairos.deliver", parent=item.traceparent, attributes={
                    "kairos.job_id": item.job_id, "kairos.execution_id": item.execution_id,
                    "kairos.attempt": item.attempt, "http.request.method": method}) as traceparent:
                # The occurrence's trace goes to the target: its own spans join it.
                headers["traceparent"] = traceparent or tracing.child_of(item.traceparent)
                # One deadline for the whole exchange (httpx's own timeout restarts with every read).
                async with asyncio.timeout(timeout):
                    status, encoding, raw = await self._exchange(method, pinned, body, headers, extensions,
                                                                 timeout)
        except (TimeoutError, httpx.TimeoutException):
            self.breakers.record_failure(circuit)
            return Verdict("retry", f"timed out after {timeout:.3g}s")
        except httpx.HTTPError as exc:
            self.breakers.record_failure(circuit)
            # The exception may name the address connected to: say the host the tenant wrote instead.
            text = str(exc).replace(str(address), host)
            return Verdict("retry", f"connection error: {type(exc).__name__}: {text}".rstrip(": "))
        if 200 <= status < 300:
            self.breakers.record_success(circuit)
            return Verdict("succeeded", str(status))
        detail = f"HTTP {status}: {_excerpt(raw, self.config.error_body_bytes, encoding)}".strip().rstrip(":")
        if status in RETRYABLE_STATUS or status >= 500:
            self.breakers.record_failure(circuit)
            return Verdict("retry", detail)
        self.breakers.record_success(circuit)  # the origin answers; this request never will
        return Verdict("dead", detail)

    async def _exchange(self, method: str, url: httpx.URL, body: bytes, headers: dict[str, str],
                        extensions: dict[str, str], timeout: float) -> tuple[int, str | None, bytes]:
        """(status, Content-Encoding, at most error_body_bytes of the answer); a 2xx answer is not read."""
        async with self.client.stream(method, url, content=body or None, headers=headers, timeout=timeout,
                                      extensions=extensions) as response:
            if 200 <= response.status_code < 300:
                return response.status_code, None, b""
            raw = bytearray()
            async for chunk in response.aiter_raw():
                raw += chunk
                if len(raw) >= self.config.error_body_bytes:
                    break
            return response.status_code, response.headers.get("content-encoding"), bytes(raw)
