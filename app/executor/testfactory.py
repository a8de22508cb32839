"""Factories for tests and benchmarks (river's ``testfactory``): rows that satisfy every constraint.

Jobs made here have no due_index row (nothing for a scheduler to pick up); their executions are
inserted ready, as the scheduler's dispatch would leave them, in one statement over arrays.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store import tenants
from app.store.db import Database
from app.store.queries import q

HTTP_QUEUE = "@http"


@dataclass(frozen=True)
class TenantFixture:
    tenant_id: UUID
    name: str
    key: str
    signing_secret: str


async def tenant(db: Database, name: str | None = None) -> TenantFixture:
    name = name or f"t-{uuid.uuid4().hex[:8]}"
    created = await db.transaction(lambda c: tenants.create(c, name))
    assert created is not None, f"tenant {name} exists"
    t, key = created
    return TenantFixture(t.tenant_id, t.name, key, t.signing_secret)


def tenant_queue(tenant_id: UUID, pool: str) -> str:
    return f"tenant:{tenant_id}:{pool}"


def shared_queue(pool: str) -> str:
    return f"shared:{pool}"


async def job(db: Database, tenant_id: UUID, *, queue: str, target_ref: str | None = None,
              payload: Any = None, max_attempts: int = 3, backoff_s: float = 10.0,
              max_backoff_s: float = 3600.0, timeout_s: int = 300, name: str = "job") -> UUID:
    """An active one-off job targeting ``queue`` ('@http' makes an http job; give target_ref a URL)."""
    job_id = uuid.uuid4()
    now = datetime.now(timezone.utc)
    is_http = queue == HTTP_QUEUE
    params = {
        "job_id": job_id, "tenant_id": tenant_id, "name": name,
        "target_type": "http" if is_http else "queue",
        "target_ref": target_ref or ("http://127.0.0.1:9/" if is_http else queue.rsplit(":", 1)[-1]),
        "queue": queue, "payload": json.dumps({"hello": "world"} if payload is None else payload),
        "schedule_kind": "once", "run_at": now, "cron": None, "cron_resolved": None, "tz": None,
        "jitter_s": 0, "dst_gap": "shift", "dst_repeat": "once", "max_attempts": max_attempts,
        "backoff_s": backoff_s, "max_backoff_s": max_backoff_s, "timeout_s": timeout_s,
        "concurrency": "allow", "misfire": "run_once", "next_nominal_at": now, "next_run_at": now,
        "idempotency_key": None, "request_hash": None,
    }

    async def insert(conn: AsyncConnection) -> None:
        await conn.execute(q("JobInsert"), params)

    await db.transaction(insert)
    return job_id


async def ready_executions(db: Database, job_id: UUID, count: int = 1, *,
                           first: datetime | None = None) -> list[UUID]:
    """``count`` ready executions of one job, scheduled one millisecond apart, already due."""
    start = first or datetime.now(timezone.utc) - timedelta(seconds=1)
    times = [start - timedelta(milliseconds=i) for i in range(count)]
    return await insert_ready(db, [job_id] * count, times)


async def insert_ready(db: Database, job_ids: Sequence[UUID], scheduled_for: Sequence[datetime]) -> list[UUID]:
    async def insert(conn: AsyncConnection) -> list[UUID]:
        rows = await conn.execute(q("ExecutionInsertReadyMany"),
                                  {"job_ids": list(job_ids), "scheduled_for": list(scheduled_for)})
        return [r.execution_id for r in rows]

    return await db.transaction(insert)
