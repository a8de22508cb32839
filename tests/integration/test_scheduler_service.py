"""serve() in-process on the real clock: a job due in one second starts on time, and a stop
hands every shard back within a few seconds."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from datetime import datetime, timedelta, timezone

from sqlalchemy import text

from app.config import Settings
from app.domain.shards import shard_of
from app.scheduler.service import serve
from app.store.db import Database
from tests import factories
from tests.support.polling import poll


async def test_serve_dispatches_a_job_due_in_one_second_and_hands_shards_back_on_stop(db: Database) -> None:
    settings = dataclasses.replace(Settings(), lease_ttl_s=5.0, loader_interval_s=1.0)
    stop = asyncio.Event()
    task = asyncio.create_task(serve(settings, db, stop), name="test.scheduler")

    async def owned() -> int:
        leases = await db.transaction(lambda tx: tx.shard_leases.list_all())
        return sum(lease.owner is not None for lease in leases)

    assert await poll(lambda: _eq(owned(), 256), timeout_s=10, interval_s=0.05, what="every shard to be owned")
    tenant, _ = await db.transaction(lambda c: c.tenants.create("soon"))
    job_id = uuid.uuid4()
    # Submitted while the scheduler runs, due one second later ("delaySeconds: 1").
    run_at = datetime.now(timezone.utc) + timedelta(seconds=1)
    job = factories.SeedJob(
        job_id=job_id,
        tenant_id=tenant.tenant_id,
        shard_id=shard_of(job_id),
        name="soon",
        pool="work",
        queue="q",
        schedule_kind="once",
        nominal_at=run_at,
        next_run_at=run_at,
    )
    await factories.raw(db, lambda c: factories.seed_jobs(c, [job]))

    async def dispatched():
        async def read(conn):
            return (
                await conn.execute(
                    text("SELECT dispatched_at, ready_at FROM executions WHERE job_id = :j"), {"j": job_id}
                )
            ).first()

        return await factories.raw(db, read)

    row = await poll(dispatched, timeout_s=10, interval_s=0.05, what="the job to be dispatched")
    assert row is not None, "the job was never dispatched"
    assert row.ready_at == run_at  # ready at its due time, however early it was dispatched
    # Dispatched once the loader (every second) saw it: up to dispatch-ahead before its due time,
    # never later than the loader period after it (not the next window scan).
    lag = (row.dispatched_at - row.ready_at).total_seconds()
    assert -settings.dispatch_ahead_s <= lag < 1.5, lag
    stopped_at = time.monotonic()
    stop.set()
    await asyncio.wait_for(task, timeout=10)
    assert time.monotonic() - stopped_at < 5
    assert await owned() == 0


async def _eq(awaitable, expected) -> bool:
    return await awaitable == expected
