"""What a tenant's settings ask of a submit besides its body: which tenants are critical
(docs/durability.md), the manual-run quota, and the refusals every quota answers with (docs/quotas.md).

``SubmitWriter`` (app.api.jobs.submit) holds a ``CriticalTenants`` and a ``ManualRunQuota`` per API
process and checks the submit-rate and active-jobs quotas itself, refusing with the errors made here."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from uuid import UUID

from app import errors, observability
from app.domain.limits import TokenBuckets
from app.store import Database, tenants

# How often each API process re-reads which tenants are critical (their submits commit on the standby).
CRITICAL_REFRESH_S = 2.0
# The active-jobs quota frees up only as jobs end or are cancelled: its Retry-After is a hint.
ACTIVE_JOBS_RETRY_AFTER_S = 30
# A hint only: the in-flight quota frees up as the tenant's manual executions finish.
MANUAL_INFLIGHT_RETRY_AFTER_S = 10


class CriticalTenants:
    """Which tenants are critical (docs/durability.md), re-read at most every ``refresh_s``: a
    submit costs a set lookup; ``kairos tenants set-critical`` takes effect within ``refresh_s``."""

    def __init__(self, refresh_s: float = CRITICAL_REFRESH_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.refresh_s = refresh_s
        self._clock = clock
        self._ids: frozenset[UUID] = frozenset()
        self._until = float("-inf")
        self._reading: asyncio.Lock | None = None

    async def contains(self, db: Database, tenant_id: UUID) -> bool:
        if self._clock() >= self._until:
            self._reading = self._reading or asyncio.Lock()
            async with self._reading:
                if self._clock() >= self._until:
                    self._ids = await db.transaction(
                        lambda tx: tx.durability.critical_tenants(), isolation="READ COMMITTED"
                    )
                    self._until = self._clock() + self.refresh_s
        return tenant_id in self._ids


def _retry_after(seconds: float) -> int:
    return max(1, math.ceil(seconds))


def submit_rate_exceeded(rate: int, wait_s: float) -> errors.TenantQuotaExceeded:
    return errors.TenantQuotaExceeded(
        f"the tenant's submit rate of {rate} jobs per second is reached",
        quota="maxSubmitPerSecond",
        limit=rate,
        retry_after_s=_retry_after(wait_s),
    )


def active_jobs_exceeded(cap: int) -> errors.TenantQuotaExceeded:
    return errors.TenantQuotaExceeded(
        f"the tenant holds its quota of {cap} active jobs (active or paused); cancel some or wait for one-off "
        "jobs to run",
        quota="maxActiveJobs",
        limit=cap,
        retry_after_s=ACTIVE_JOBS_RETRY_AFTER_S,
    )


def manual_rate_exceeded(rate: int, wait_s: float) -> errors.TenantQuotaExceeded:
    return errors.TenantQuotaExceeded(
        f"the tenant's rate of {rate} manual or backfill executions per second is reached",
        quota="maxManualRunsPerSecond",
        limit=rate,
        retry_after_s=_retry_after(wait_s),
    )


def manual_inflight_exceeded(cap: int) -> errors.TenantQuotaExceeded:
    return errors.TenantQuotaExceeded(
        f"the tenant holds its quota of {cap} unfinished manual or backfill executions; wait for some to finish",
        quota="maxManualInFlight",
        limit=cap,
        retry_after_s=MANUAL_INFLIGHT_RETRY_AFTER_S,
    )


class ManualRunQuota:
    """The bounds on executions a tenant makes outside its schedule (``:run``, ``:backfill``):
    ``max_manual_per_s`` executions per second per API process (a token bucket holding one second's
    worth, one token per execution) and ``max_manual_inflight`` unfinished ones (counted in the
    database, like active jobs). docs/quotas.md."""

    def __init__(self, db: Database, quotas: tenants.QuotaCache, clock: Callable[[], float]) -> None:
        self.db = db
        self.quotas = quotas
        self.rates = TokenBuckets()
        self._clock = clock

    async def admit(self, tenant_id: UUID, wanted: int) -> int:
        """Take room for up to ``wanted`` executions: how many may be made (>= 1); raises
        TenantQuotaExceeded, before anything is written, when not one may. Whatever of it the caller
        does not use goes back through ``unused``."""
        quota = self.quotas.cached(tenant_id) or await self.quotas.get(self.db, tenant_id)
        if quota.max_manual_inflight is not None:
            cap = quota.max_manual_inflight
            held = await self.db.transaction(
                lambda tx: tx.tenants.manual_inflight_count(tenant_id, cap), isolation="READ COMMITTED"
            )
            if held >= cap:
                observability.quota_refusals.add(1, {"quota": "max_manual_inflight"})
                raise manual_inflight_exceeded(cap)
            wanted = min(wanted, cap - held)
        if quota.max_manual_per_s is not None:
            rate = quota.max_manual_per_s
            taken = self.rates.take(tenant_id, wanted, rate, rate, self._clock())
            if taken.granted == 0:
                observability.quota_refusals.add(1, {"quota": "max_manual_per_s"})
                raise manual_rate_exceeded(rate, taken.retry_after_s)
            wanted = taken.granted
        return wanted

    def unused(self, tenant_id: UUID, count: int) -> None:
        """Give back the tokens of ``count`` admitted executions that were not made."""
        quota = self.quotas.cached(tenant_id)
        if quota is not None and quota.max_manual_per_s is not None:
            rate = quota.max_manual_per_s
            self.rates.give_back(tenant_id, count, rate, rate, self._clock())
