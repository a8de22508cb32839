"""The reads the local failure drills (app/drill) make to judge a drill: who owns the shards, which
acknowledged jobs survived a failover, how attempts ended. Never used on a hot path.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.store.arrays import plain
from app.store.queries import q
from app.store.table import Table


@dataclass(frozen=True)
class LiveShards:
    owner: str
    region: str | None
    shards: int


@dataclass(frozen=True)
class AttemptOutcomeCount:
    worker_id: str
    outcome: str  # succeeded | failed | expired | cancelled | discarded
    attempts: int


@dataclass(frozen=True)
class LeasedExecution:
    execution_id: UUID
    job_id: UUID
    scheduled_for: datetime
    attempt: int


class Drill(Table):
    """The drill statements of one transaction."""

    async def live_shards(self) -> list[LiveShards]:
        return [LiveShards(r.owner, r.region, int(r.shards)) for r in await self._conn.execute(q("DrillShardsLive"))]

    async def jobs_present(self, tenant_id: UUID, job_ids: Sequence[UUID]) -> set[UUID]:
        if not job_ids:
            return set()
        rows = await self._conn.execute(q("DrillJobsPresent"), {"tenant_id": tenant_id, "job_ids": plain(job_ids)})
        return {r.job_id for r in rows}

    async def attempt_outcomes(self, tenant_id: UUID) -> list[AttemptOutcomeCount]:
        rows = await self._conn.execute(q("DrillAttemptOutcomes"), {"tenant_id": tenant_id})
        return [AttemptOutcomeCount(r.worker_id, r.outcome, int(r.attempts)) for r in rows]

    async def leased_by(self, tenant_id: UUID, worker_id: str) -> list[LeasedExecution]:
        rows = await self._conn.execute(q("DrillExecutionsLeasedBy"), {"tenant_id": tenant_id, "worker_id": worker_id})
        return [LeasedExecution(r.execution_id, r.job_id, r.scheduled_for, r.attempt) for r in rows]

    async def due_of(self, job_ids: Sequence[UUID]) -> dict[UUID, datetime]:
        """job_id -> the occurrence it has waiting in due_index."""
        if not job_ids:
            return {}
        rows = await self._conn.execute(q("DrillDueOf"), {"job_ids": plain(job_ids)})
        return {r.job_id: r.next_run_at for r in rows}

    async def executions_of(self, job_ids: Sequence[UUID]) -> list[tuple[UUID, datetime, str]]:
        """(job_id, scheduled_for, state) of every execution of these jobs."""
        if not job_ids:
            return []
        rows = await self._conn.execute(q("DrillExecutionsOf"), {"job_ids": plain(job_ids)})
        return [(r.job_id, r.scheduled_for, r.state) for r in rows]
