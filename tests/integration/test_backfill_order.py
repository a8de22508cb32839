"""A backfill's occurrences are handed out in scheduled order: when several are ready at one lease (a
worker or the HTTP pool that was busy, a fast pace), the batch lists them oldest occurrence first."""

from __future__ import annotations

import random
from datetime import datetime, timedelta, timezone

from app.store.db import Database
from tests import factories as tf


async def test_a_leased_batch_of_a_backfill_is_in_scheduled_order(db: Database) -> None:
    t = await tf.tenant(db)
    job_id = await tf.job(db, t.tenant_id, queue=f"tenant:{t.tenant_id}:reports")
    now = datetime.now(timezone.utc)
    nominals = [now - timedelta(days=30) + timedelta(hours=i) for i in range(40)]
    ready = [now - timedelta(seconds=10) + timedelta(milliseconds=100 * i) for i in range(40)]  # paced, all due

    # Stored in another order than their occurrences' (two backfills whose ranges interleave, or rows that
    # moved): the order handed out must come from the statement, not from where the rows happen to lie.
    order = random.Random(7).sample(range(40), 40)

    async def backfill(tx):
        job = await tx.jobs.get(t.tenant_id, job_id)
        made = 0
        for i in order:
            made += len(
                await tx.jobs.insert_executions(job, [nominals[i]], [ready[i]], trigger="backfill", dry_run=False)
            )
        return made

    assert await db.transaction(backfill) == 40
    job = await db.transaction(lambda tx: tx.jobs.get(t.tenant_id, job_id))
    leased = await db.transaction(lambda tx: tx.executions.lease(job.queue, "w-1", 40, 30.0))
    assert [item.scheduled_for for item in leased] == nominals
