"""Factories for tests and benchmarks (river's ``testfactory``): rows that satisfy every constraint.

Not shipped: the wheel carries app/ only. The loadtest scripts import this module too (they put
the repository root on sys.path). Its statements are in ``tests/sql/factories.sql``, read with the
catalogue's own parser, so they never join the shipped catalogue.

Jobs made by ``job`` have no due_index row (nothing for a scheduler to pick up); their executions
are inserted ready, as the scheduler's dispatch would leave them, in one statement over arrays.
``seed_jobs`` is the other way in: many active jobs with their due_index rows, for the scheduler.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from functools import cache
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncConnection

from app.domain.queues import HTTP_QUEUE, pool_of_queue, shared_queue, tenant_queue
from app.store import arrays
from app.store.db import Database
from app.store.jobs import NewJob
from app.store.queries import NamedQuery, parse
from app.store.tenants import signing_secrets_of

SQL = Path(__file__).resolve().parent / "sql" / "factories.sql"

__all__ = [
    "HTTP_QUEUE",
    "SeedJob",
    "TenantFixture",
    "insert_ready",
    "job",
    "raw",
    "ready_executions",
    "seed_jobs",
    "shared_queue",
    "statements",
    "tenant",
    "tenant_queue",
]

T = TypeVar("T")


async def raw(db: Database, work: Callable[[AsyncConnection], Awaitable[T]], *, isolation: str | None = None) -> T:
    """Run ``work`` on a bare connection in one transaction: tests and benchmarks that read or
    bend rows the shipped ``Store`` has no statement for (the tiers never do this)."""
    async with db.engine.connect() as conn:
        if isolation:
            await conn.execution_options(isolation_level=isolation)
        async with conn.begin():
            return await work(conn)


@cache
def statements() -> dict[str, NamedQuery]:
    """The named statements of tests/sql/factories.sql."""
    return {s.name: s for s in parse(SQL.name, SQL.read_text())}


@cache
def _q(name: str) -> TextClause:
    return text(statements()[name].sql)


@dataclass(frozen=True)
class TenantFixture:
    tenant_id: UUID
    name: str
    key: str
    signing_secret: str


async def tenant(db: Database, name: str | None = None) -> TenantFixture:
    name = name or f"t-{uuid.uuid4().hex[:8]}"
    created = await db.transaction(lambda c: c.tenants.create(name))
    assert created is not None, f"tenant {name} exists"
    t, key = created
    return TenantFixture(t.tenant_id, t.name, key, signing_secrets_of(t).current)


async def job(
    db: Database,
    tenant_id: UUID,
    *,
    queue: str,
    target_ref: str | None = None,
    payload: Any = None,
    max_attempts: int = 3,
    backoff_s: float = 10.0,
    max_backoff_s: float = 3600.0,
    timeout_s: int = 300,
    name: str = "job",
) -> UUID:
    """An active one-off job targeting ``queue`` ('@http' makes an http job; give target_ref a URL)."""
    job_id = uuid.uuid4()
    now = datetime.now(timezone.utc)
    is_http = queue == HTTP_QUEUE
    params = {
        "job_id": job_id,
        "tenant_id": tenant_id,
        "name": name,
        "target_type": "http" if is_http else "queue",
        "target_ref": target_ref or ("http://127.0.0.1:9/" if is_http else pool_of_queue(queue)),
        "queue": queue,
        "payload": json.dumps({"hello": "world"} if payload is None else payload),
        "schedule_kind": "once",
        "run_at": now,
        "cron": None,
        "cron_resolved": None,
        "tz": None,
        "jitter_s": 0,
        "dst_gap": "shift",
        "dst_repeat": "once",
        "max_attempts": max_attempts,
        "backoff_s": backoff_s,
        "max_backoff_s": max_backoff_s,
        "timeout_s": timeout_s,
        "concurrency": "allow",
        "misfire": "run_once",
        "next_nominal_at": now,
        "next_run_at": now,
        "idempotency_key": None,
        "request_hash": None,
    }

    async def insert(conn: AsyncConnection) -> None:
        await conn.execute(_q("JobInsert"), params)

    await raw(db, insert)
    return job_id


def new_job(tenant_id: UUID, *, pool: str = "work", at: datetime | None = None, **fields: Any) -> NewJob:
    """A valid one-off job of ``tenant_id`` for ``tx.jobs.insert_many``, due ``at`` (default now) in
    ``pool``; ``fields`` override any column (a cron job: schedule_kind, cron, cron_resolved, tz)."""
    at = at or datetime.now(timezone.utc)
    row = {
        "job_id": uuid.uuid4(),
        "tenant_id": tenant_id,
        "name": "job",
        "target_type": "queue",
        "target_ref": pool,
        "queue": tenant_queue(tenant_id, pool),
        "payload": {"hello": "world"},
        "schedule_kind": "once",
        "run_at": at,
        "cron": None,
        "cron_resolved": None,
        "tz": None,
        "jitter_s": 0,
        "dst_gap": "shift",
        "dst_repeat": "once",
        "max_attempts": 3,
        "backoff_s": 10.0,
        "max_backoff_s": 3600.0,
        "timeout_s": 300,
        "concurrency": "allow",
        "misfire": "run_once",
        "next_nominal_at": at,
        "next_run_at": at,
        "idempotency_key": None,
        "request_hash": None,
        "start_at": None,
        "end_at": None,
        "every_s": None,
        "anchor_at": None,
        "labels": {},
        "dry_run": False,
        "max_retry_duration_s": None,
        "http_method": "POST",
        "http_headers": {},
        "traceparent": None,
        "payload_ref": None,
    }
    return NewJob(**{**row, **fields})


async def ready_executions(db: Database, job_id: UUID, count: int = 1, *, first: datetime | None = None) -> list[UUID]:
    """``count`` ready executions of one job, scheduled one millisecond apart, already due."""
    start = first or datetime.now(timezone.utc) - timedelta(seconds=1)
    times = [start - timedelta(milliseconds=i) for i in range(count)]
    return await insert_ready(db, [job_id] * count, times)


async def insert_ready(db: Database, job_ids: Sequence[UUID], scheduled_for: Sequence[datetime]) -> list[UUID]:
    async def insert(conn: AsyncConnection) -> list[UUID]:
        rows = await conn.execute(
            _q("ExecutionInsertReadyMany"),
            {"job_ids": arrays.plain(job_ids), "scheduled_for": arrays.plain(scheduled_for)},
        )
        return [r.execution_id for r in rows]

    return await raw(db, insert)


@dataclass(frozen=True, slots=True)
class SeedJob:
    """A job for bulk seeding: a queue target, default retry policy, the given schedule."""

    job_id: UUID
    tenant_id: UUID
    shard_id: int
    name: str
    pool: str
    queue: str
    schedule_kind: str  # 'once' or 'cron'
    nominal_at: datetime
    next_run_at: datetime
    cron: str | None = None
    tz: str | None = None
    jitter_s: int = 0
    dst_gap: str = "shift"
    dst_repeat: str = "once"
    concurrency: str = "allow"
    misfire: str = "run_once"


async def seed_jobs(conn: AsyncConnection, jobs: Sequence[SeedJob]) -> None:
    """Insert many active jobs with their due_index rows in one statement."""
    if not jobs:
        return
    await conn.execute(
        _q("JobSeedMany"),
        {
            "job_ids": arrays.plain(j.job_id for j in jobs),
            "tenant_ids": arrays.plain(j.tenant_id for j in jobs),
            "names": arrays.texts(j.name for j in jobs),
            "pools": arrays.texts(j.pool for j in jobs),
            "queues": arrays.texts(j.queue for j in jobs),
            "schedule_kinds": arrays.texts(j.schedule_kind for j in jobs),
            "crons": arrays.texts(j.cron for j in jobs),
            "tzs": arrays.texts(j.tz for j in jobs),
            "jitter_ss": arrays.plain(j.jitter_s for j in jobs),
            "dst_gaps": arrays.texts(j.dst_gap for j in jobs),
            "dst_repeats": arrays.texts(j.dst_repeat for j in jobs),
            "concurrencies": arrays.texts(j.concurrency for j in jobs),
            "misfires": arrays.texts(j.misfire for j in jobs),
            "nominal_ats": arrays.plain(j.nominal_at for j in jobs),
            "next_run_ats": arrays.plain(j.next_run_at for j in jobs),
            "shard_ids": arrays.plain(j.shard_id for j in jobs),
            "due_minutes": arrays.plain(j.next_run_at.replace(second=0, microsecond=0) for j in jobs),
        },
    )
