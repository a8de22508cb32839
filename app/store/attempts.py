"""Attempts (one row per lease of an execution) and the bulk-replay budget."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.queries import q


@dataclass(frozen=True)
class Attempt:
    execution_id: UUID
    attempt: int
    worker_id: str
    leased_at: datetime
    lease_until: datetime
    finished_at: datetime | None
    outcome: str
    error: str | None
    result: Any


async def list_for_execution(conn: AsyncConnection, tenant_id: UUID, execution_id: UUID) -> list[Attempt]:
    rows = await conn.execute(q("AttemptListForExecution"), {"tenant_id": tenant_id, "execution_id": execution_id})
    return [Attempt(**r._mapping) for r in rows]


async def take_replay_budget(conn: AsyncConnection, tenant_id: UUID, wanted: int, *, per_window: int,
                             window_s: float, now: datetime | None = None) -> tuple[int, datetime]:
    """Grant up to ``wanted`` bulk replays from the tenant's window: (granted, when the window resets)."""
    await conn.execute(q("ReplayBudgetEnsure"), {"tenant_id": tenant_id})
    row = (await conn.execute(q("ReplayBudgetGet"), {"tenant_id": tenant_id, "now": now})).one()
    window = timedelta(seconds=window_s)
    start, used = row.window_start, row.used
    if start + window <= row.now:
        start, used = row.now, 0
    granted = max(0, min(wanted, per_window - used))
    if granted:
        await conn.execute(q("ReplayBudgetPut"), {"tenant_id": tenant_id, "window_start": start,
                                                  "used": used + granted})
    return granted, start + window
