"""ExecutionNextReadyIn: when a waiting Lease should look again."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from app.store.db import Database
from tests import factories as tf


async def test_seconds_until_the_earliest_ready_execution_across_tenants(db: Database) -> None:
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    queue = tf.shared_queue("fleet")
    assert await db.transaction(lambda c: c.executions.next_ready_in(queue, now=now)) is None
    for offset_s in (30.0, 4.5):
        tenant = await tf.tenant(db)
        job = await tf.job(db, tenant.tenant_id, queue=queue)
        await tf.insert_ready(
            db, [job, job], [now + timedelta(seconds=offset_s), now + timedelta(seconds=offset_s + 10)]
        )
    assert await db.transaction(lambda c: c.executions.next_ready_in(queue, now=now)) == 4.5
    assert await db.transaction(lambda c: c.executions.next_ready_in(queue, now=now + timedelta(seconds=5))) == -0.5
    assert await db.transaction(lambda c: c.executions.next_ready_in(tf.shared_queue("other"), now=now)) is None
