"""How the http pool sends one delivery and reads its answer: the address the egress policy allows, the
request (``app.executor.http_request``), and the verdict the answer, the breaker and the circuit's adaptive
limit give. :class:`HttpPool` (``app.executor.http_pool``) builds on :class:`Attempts` and decides when.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from app.domain.egress import IPAddress, literal_address
from app.domain.queues import HTTP_QUEUE
from app.errors import EgressRefused, TargetUnresolved
from app.executor.batching import Deferral, Outcomes
from app.executor.breaker import Breakers, Key
from app.executor.delivery_egress import EgressPolicy, resolve
from app.executor.http_config import HttpPoolConfig
from app.executor.http_request import (
    FIELD_NAME,
    FIELD_VALUE,
    Target,
    Verdict,
    delivery_headers,
    excerpt,
)
from app.executor.http_send import Origin, Sender, SendFailed, retry_after_s
from app.executor.limits import AdaptiveLimit
from app.executor.payloads import encode_payload
from app.observability import tracing
from app.store import executions as ex

log = logging.getLogger("app.executor.http_pool")

RETRYABLE_STATUS = frozenset({408, 429})
CONGESTION_STATUS = frozenset({429, 503})  # the origin asks for less: the circuit's limit halves
TARGETS_CACHED_MAX = 10_000  # (tenant, URL) targets and literal addresses kept
# A request must end this long before its lease can no longer be renewed (started_at + the job's timeout).
_TIMEOUT_MARGIN_S = 0.5


@dataclass(eq=False)
class Held:
    """A delivery this pool holds the lease of, from the lease to its outcome."""

    item: ex.Leased
    target: Target | None  # None when the URL is unusable (dead without sending)
    # Monotonic time by which the request must be over: the attempt's start (read before the statement
    # that set it, so never later than the database's) + the job's timeout.
    deadline: float
    leased_at: float = 0.0  # monotonic
    waiting: bool = False  # leased but not started: no slot held
    sending: bool = False  # holds a slot (of the executor, its circuit and its tenant)

    @property
    def key(self) -> Key | None:
        """(tenant, origin): the circuit the delivery goes through."""
        return self.target.key if self.target is not None else None

    @property
    def ref(self) -> ex.AttemptRef:
        return ex.AttemptRef(self.item.execution_id, self.item.attempt)


class Attempts:
    """One delivery's request and verdict; the state it reads is set by :class:`HttpPool`."""

    config: HttpPoolConfig
    outcomes: Outcomes
    egress: EgressPolicy
    breakers: Breakers
    send: Sender
    clock: Callable[[], float]
    _limits: dict[Key, AdaptiveLimit]
    _literals: dict[tuple[str, int], IPAddress]

    async def _address(self, target: Target) -> IPAddress:
        """The address to connect to (``resolve``); a literal address's answer is kept (the policy is fixed)."""
        found = self._literals.get((target.host, target.port))
        if found is not None:
            return found
        address = await resolve(self.egress, target.host, target.port)
        if literal_address(target.host) is not None:
            if len(self._literals) >= TARGETS_CACHED_MAX:
                self._literals.clear()
            self._literals[(target.host, target.port)] = address
        return address

    def _limit(self, key: Key) -> AdaptiveLimit:
        found = self._limits.get(key)
        if found is None:
            found = self._limits[key] = AdaptiveLimit(
                min(self.config.per_origin_start, self.config.per_origin), self.config.per_origin, clock=self.clock
            )
        return found

    async def _report(self, item: ex.Leased, verdict: Verdict, sent_at: datetime | None) -> None:
        if verdict.outcome == "succeeded":
            await self.outcomes.complete(
                ex.Success(item.execution_id, item.attempt, {"status": int(verdict.detail)}, sent_at=sent_at)
            )
        elif verdict.outcome == "deferred":
            # Jittered, so deliveries deferred together do not all come back in the same instant.
            delay = float(verdict.detail) * random.uniform(1.0, 1.2)
            await self.outcomes.defer(Deferral(item.execution_id, item.attempt, delay))
        else:
            await self.outcomes.fail(
                ex.Failure(
                    item.execution_id,
                    item.attempt,
                    verdict.detail,
                    retryable=verdict.outcome == "retry",
                    sent_at=sent_at,
                    retry_after_s=verdict.retry_after_s,
                )
            )

    async def _attempt(self, entry: Held, item: ex.Leased, sent: list[datetime]) -> Verdict:
        target = entry.target
        assert target is not None
        circuit = target.key
        try:
            address = await self._address(target)
        except EgressRefused as exc:
            self.breakers.abandon(circuit)  # nothing was sent: no news of the origin
            log.warning(
                "delivery refused by the egress policy",
                extra={"execution_id": item.execution_id, "tenant_id": item.tenant_id, "host": target.host},
            )
            return Verdict("dead", exc.detail)
        except TargetUnresolved as exc:
            return self._failed(circuit, 0.0, Verdict("retry", exc.detail))
        timeout = entry.deadline - _TIMEOUT_MARGIN_S - self.clock()
        if timeout <= 0:
            self.breakers.abandon(circuit)
            return Verdict("retry", "timed out before the request could be sent")
        # GET carries no body (the signature then covers the empty body); the others carry the payload.
        method = item.http_method
        body = b"" if method == "GET" else encode_payload(item.payload)
        headers = delivery_headers(item, target, body)
        # The job's own headers against RFC 9110's grammar before anything is sent (Kairos's are valid).
        for name, value in (item.http_headers or {}).items():
            if not FIELD_NAME(name) or not FIELD_VALUE(value):
                self.breakers.abandon(circuit)
                return Verdict(
                    "dead",
                    f"the request cannot be sent: header {name!r} is not a valid HTTP field "
                    "(visible ASCII, spaces and tabs only)",
                )
        # Connect to the address the egress policy checked (no second DNS answer can differ).
        to = Origin(target.scheme, str(address), target.port, target.host if target.scheme == "https" else None)
        began = self.clock()
        sent.append(datetime.now(timezone.utc))
        self.outcomes.sent(item, sent[0], HTTP_QUEUE)
        try:
            if tracing.enabled():
                with tracing.span(
                    "kairos.deliver",
                    parent=item.traceparent,
                    attributes={
                        "kairos.job_id": item.job_id,
                        "kairos.execution_id": item.execution_id,
                        "kairos.attempt": item.attempt,
                        "http.request.method": method,
                    },
                ) as traceparent:
                    # The occurrence's trace goes to the target: its own spans join it.
                    headers["traceparent"] = traceparent or tracing.child_of(item.traceparent)
                    answer = await self.send(method, to, target.path, body, headers, timeout)
            else:
                headers["traceparent"] = tracing.child_of(item.traceparent)
                answer = await self.send(method, to, target.path, body, headers, timeout)
        except TimeoutError:
            return self._failed(
                circuit, self.clock() - began, Verdict("retry", f"timed out after {timeout:.3g}s"), congested=True
            )
        except SendFailed as exc:
            # The error may name the address connected to: say the host the tenant wrote instead.
            text = str(exc).replace(str(address), target.host)
            return self._failed(
                circuit, self.clock() - began, Verdict("retry", f"connection error: {text}"), congested=True
            )
        latency = self.clock() - began
        status = answer.status
        if 200 <= status < 300:
            self.breakers.record_success(circuit)
            self._limit(circuit).succeeded(latency)
            return Verdict("succeeded", str(status))
        detail = f"HTTP {status}: {excerpt(answer.excerpt, self.config.error_body_bytes, answer.encoding)}"
        detail = detail.strip().rstrip(":")
        if status in RETRYABLE_STATUS or status >= 500:
            wait = retry_after_s(answer.retry_after) if status in CONGESTION_STATUS else None
            return self._failed(
                circuit,
                latency,
                Verdict("retry", detail, wait),
                congested=status in CONGESTION_STATUS or status == 408,
                retry_after=wait,
            )
        self.breakers.record_success(circuit)  # the origin answers; this request never will
        self._limit(circuit).succeeded(latency)
        return Verdict("dead", detail)

    def _failed(
        self,
        circuit: Key,
        latency_s: float,
        verdict: Verdict,
        *,
        congested: bool = False,
        retry_after: float | None = None,
    ) -> Verdict:
        """A failure the origin is to blame for: counted by the breaker and the limit. Once the circuit is
        open (this failure opened it, or it was in flight when another did) the delivery is deferred to the
        end of the cool-down, its attempt refunded: an outage spends only the attempts that reveal it."""
        if congested:
            self._limit(circuit).congested(latency_s, retry_after)
        opened = self.breakers.record_failure(circuit)
        left = self.breakers.open_for(circuit)
        # The failure that opened the circuit spends its attempt (a failed probe's too), so a target that
        # never recovers still reaches its dead letter.
        if left is not None and not opened:
            return Verdict("deferred", f"{max(left, retry_after or 0.0):.3f}")
        return verdict
