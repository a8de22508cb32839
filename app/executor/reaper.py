"""LeaseReaper: returns executions whose lease expired to ready (or dead when out of attempts).

An expiry counts as an attempt (the lease bumped it), so a job that crashes its worker every
time ends dead after max_attempts instead of looping. The guarded UPDATE re-checks
``state = 'leased' AND attempt = x AND lease_until < now``, so a heartbeat that lands first
keeps its lease, and several executors reaping at once never double-count.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from app import observability
from app.domain.states import ExecutionState
from app.duties import run_every
from app.store import Database

log = logging.getLogger(__name__)

LEASE_REAPER_INTERVAL_S_DEFAULT = 1.0
LEASE_REAPER_BATCH_DEFAULT = 1000


@dataclass(frozen=True)
class ReapResult:
    """Executions whose lease had expired: made ready for another attempt, or dead (none left)."""

    ready: int = 0
    dead: int = 0

    @property
    def total(self) -> int:
        return self.ready + self.dead

    def __add__(self, other: ReapResult) -> ReapResult:
        return ReapResult(self.ready + other.ready, self.dead + other.dead)


@dataclass(frozen=True)
class LeaseReaperConfig:
    # How often to look for expired leases.
    interval_s: float = LEASE_REAPER_INTERVAL_S_DEFAULT
    # Executions reaped per statement; a full batch is followed at once by another.
    batch: int = LEASE_REAPER_BATCH_DEFAULT
    # Isolation of the reaping transaction (guarded UPDATEs make READ COMMITTED safe).
    isolation: str = "READ COMMITTED"


@dataclass
class LeaseReaper:
    db: Database
    config: LeaseReaperConfig = LeaseReaperConfig()
    # Called with the number of executions made ready again (wakes local long polls).
    on_ready: Callable[[int], None] | None = None
    total: ReapResult = ReapResult()

    async def run_once(self) -> ReapResult:
        reaped = await self.db.transaction(
            lambda tx: tx.executions.reap_expired(self.config.batch), isolation=self.config.isolation
        )
        result = ReapResult(reaped.get(ExecutionState.READY, 0), reaped.get(ExecutionState.DEAD, 0))
        if result.total:
            self.total += result
            observability.lease_expiries.add(result.total)
            # An expiry ends its attempt: retried when attempts remain, else dead.
            for outcome, n in (("retried", result.ready), ("dead", result.dead)):
                if n:
                    observability.executions.add(n, {"outcome": outcome})
            log.info("expired leases reaped", extra={"ready": result.ready, "dead": result.dead})
        if result.ready and self.on_ready:
            self.on_ready(result.ready)
        return result

    async def run(self, stop: asyncio.Event) -> None:
        # A full batch: more are waiting, so the next pass runs at once.
        await run_every(
            "lease-reaper",
            self.config.interval_s,
            stop,
            self.run_once,
            again=lambda reaped: reaped.total >= self.config.batch,
        )
