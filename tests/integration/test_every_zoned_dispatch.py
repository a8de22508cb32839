"""An every job with a tz through the real dispatch: the claim carries its anchor and zone, and the next due
row lands on the same local wall-clock time across a DST change."""

from __future__ import annotations

from datetime import datetime, timezone

from app.store.db import Database
from tests import factories
from tests.integration.test_scheduler_duties import new_tenant, node, rows
from tests.support.clocks import ManualClock

UTC = timezone.utc


async def test_a_zoned_day_is_dispatched_and_its_next_due_row_keeps_the_local_time(db: Database) -> None:
    day = datetime(2026, 3, 28, 9, 0, tzinfo=UTC)  # 09:00 GMT; 09:00 BST on the 29th is 08:00 UTC
    tenant = await new_tenant(db)
    job = factories.new_job(
        tenant, at=day, schedule_kind="every", run_at=None, every_s=86400, anchor_at=day, tz="Europe/London"
    )
    await db.transaction(lambda tx: tx.jobs.insert_many([job]))
    clock = ManualClock(day)
    a = node(db, clock, "a")
    await a.tick()
    [ran] = await rows(db, "SELECT scheduled_for, state FROM executions WHERE job_id = :j", j=job.job_id)
    assert (ran.scheduled_for, ran.state) == (day, "ready")
    [due] = await rows(db, "SELECT nominal_at FROM due_index WHERE job_id = :j", j=job.job_id)
    assert due.nominal_at == datetime(2026, 3, 29, 8, 0, tzinfo=UTC)
