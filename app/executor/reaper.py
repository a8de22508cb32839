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
from dataclasses import dataclass, field

from app import observability
from app.domain.states import ExecutionState
from app.duties import run_every
from app.store import Database

log = logging.getLogger(__name__)

LeaseReaperIntervalDefault = 1.0
LeaseReaperBatchDefault = 1000


@dataclass(frozen=True)
class LeaseReaperConfig:
    # How often to look for expired leases.
    interval_s: float = LeaseReaperIntervalDefault
    # Executions reaped per statement; a full batch is followed at once by another.
    batch: int = LeaseReaperBatchDefault
    # Isolation of the reaping transaction (guarded UPDATEs make READ COMMITTED safe).
    isolation: str = "READ COMMITTED"


@dataclass
class LeaseReaper:
    db: Database
    config: LeaseReaperConfig = LeaseReaperConfig()
    # Called with the number of executions made ready again (wakes local long polls).
    on_ready: Callable[[int], None] | None = None
    total: dict[str, int] = field(default_factory=lambda: {"ready": 0, "dead": 0})

    async def run_once(self) -> dict[str, int]:
        reaped = await self.db.transaction(lambda tx: tx.executions.reap_expired(self.config.batch),
                                           isolation=self.config.isolation)
        for state, n in reaped.items():
            if n:
                self.total[state] += n
                observability.lease_expiries.add(n)
                # An expiry ends its attempt: retried when attempts remain, else dead.
                observability.executions.add(n, {"outcome": "retried" if state == ExecutionState.READY else "dead"})
        if any(reaped.values()):
            log.info("expired leases reaped", extra=reaped)
        if reaped[ExecutionState.READY] and self.on_ready:
            self.on_ready(reaped[ExecutionState.READY])
        return reaped

    async def run(self, stop: asyncio.Event) -> None:
        # A full batch: more are waiting, so the next pass runs at once.
        await run_every("lease-reaper", self.config.interval_s, stop, self.run_once,
                        again=lambda reaped: sum(reaped.values()) >= self.config.batch)
