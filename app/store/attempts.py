"""Attempts (one row per lease of an execution) and the bulk-replay budget."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from app.domain.states import AttemptOutcome
from app.store.arrays import plain
from app.store.queries import q
from app.store.table import Table


@dataclass(frozen=True)
class Attempt:
    execution_id: UUID
    attempt: int
    worker_id: str
    leased_at: datetime
    lease_until: datetime
    finished_at: datetime | None
    outcome: AttemptOutcome
    error: str | None
    result: Any
    sent_at: datetime | None = None  # an HTTP delivery's request left then: its start (a worker's: leased_at)


@dataclass(frozen=True)
class ReplayBudget:
    """A tenant's bulk-replay window, as of the database clock (row locked until commit)."""

    window_start: datetime
    used: int
    per_window: int
    window_s: float

    @property
    def left(self) -> int:
        return max(0, self.per_window - self.used)

    @property
    def resets_at(self) -> datetime:
        return self.window_start + timedelta(seconds=self.window_s)


class Attempts(Table):
    """The attempts statements of one transaction."""

    async def list_for_execution(self, tenant_id: UUID, execution_id: UUID) -> list[Attempt]:
        rows = await self._conn.execute(
            q("AttemptListForExecution"), {"tenant_id": tenant_id, "execution_id": execution_id}
        )
        return [Attempt(**{**r._mapping, "outcome": AttemptOutcome(r.outcome)}) for r in rows]

    async def list_for_executions(self, tenant_id: UUID, execution_ids: Sequence[UUID]) -> dict[UUID, list[Attempt]]:
        """execution_id -> its attempts, oldest first (executions with none are absent)."""
        if not execution_ids:
            return {}
        rows = await self._conn.execute(
            q("AttemptListForExecutions"), {"tenant_id": tenant_id, "execution_ids": plain(execution_ids)}
        )
        out: dict[UUID, list[Attempt]] = {}
        for r in rows:
            out.setdefault(r.execution_id, []).append(Attempt(**{**r._mapping, "outcome": AttemptOutcome(r.outcome)}))
        return out

    async def replay_budget(
        self, tenant_id: UUID, *, per_window: int, window_s: float, now: datetime | None = None
    ) -> ReplayBudget:
        await self._conn.execute(q("ReplayBudgetEnsure"), {"tenant_id": tenant_id})
        row = (await self._conn.execute(q("ReplayBudgetGet"), {"tenant_id": tenant_id, "now": now})).one()
        start, used = row.window_start, row.used
        if start + timedelta(seconds=window_s) <= row.now:
            start, used = row.now, 0
        return ReplayBudget(start, used, per_window, window_s)

    async def spend_replay_budget(self, tenant_id: UUID, budget: ReplayBudget, n: int) -> ReplayBudget:
        spent = ReplayBudget(budget.window_start, budget.used + n, budget.per_window, budget.window_s)
        await self._conn.execute(
            q("ReplayBudgetPut"), {"tenant_id": tenant_id, "window_start": spent.window_start, "used": spent.used}
        )
        return spent
