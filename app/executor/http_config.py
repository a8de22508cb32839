"""The HTTP pool's settings (``app.executor.http_pool``); docs/http-delivery.md says how to tune them."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from app.executor.breaker import BreakerConfig

HTTP_LEASE_S_DEFAULT = 15.0
ERROR_BODY_BYTES_DEFAULT = 512


def _default_worker_id() -> str:
    return f"executor@{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class HttpPoolConfig:
    # Requests in flight per executor.
    concurrency: int = 512
    # Ceiling of a circuit's (tenant, origin) adaptive limit of requests in flight.
    per_origin: int = 256
    # Where a circuit's limit starts (at most per_origin).
    per_origin_start: int = 32
    # Requests in flight per tenant, all origins together (None: half of ``concurrency``, at least 1).
    per_tenant: int | None = None
    # Executions leased per statement.
    batch: int = 256
    # The longest an idle pool sleeps before looking for ready work (wake-ups and due times come sooner).
    poll_interval_s: float = 0.5
    # Lease of a delivery, renewed every third of it while the delivery is held (never past its timeout).
    lease_s: float = HTTP_LEASE_S_DEFAULT
    # A delivery that waited longer than this for its slot restarts its attempt clock when it starts.
    restart_after_s: float = 1.0
    # Answer bytes kept in the error of a failed delivery.
    error_body_bytes: int = ERROR_BODY_BYTES_DEFAULT
    worker_id: str = field(default_factory=_default_worker_id)
    breaker: BreakerConfig = field(default_factory=BreakerConfig)
    isolation: str = "READ COMMITTED"

    def __post_init__(self) -> None:
        if min(self.concurrency, self.per_origin, self.per_origin_start, self.batch) < 1 or self.lease_s <= 0:
            raise ValueError("concurrency, per_origin, per_origin_start and batch must be >= 1 and lease_s > 0")

    @property
    def tenant_slots(self) -> int:
        return self.per_tenant if self.per_tenant is not None else max(1, self.concurrency // 2)

    @property
    def renew_every_s(self) -> float:
        return self.lease_s / 3

    @property
    def refill_at(self) -> int:
        """Free room worth a lease statement when the last one stopped for lack of room."""
        return max(1, min(self.batch, self.concurrency) // 4)
