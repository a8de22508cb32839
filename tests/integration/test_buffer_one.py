"""Overlap buffer_one: an occurrence due while the previous execution runs waits on the job row (one at most;
another is recorded as skipped), and the scheduler's BufferStarter starts it once the previous one settles."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from app.scheduler.buffered import BufferStarter
from app.store.db import Database
from tests.integration.test_scheduler_duties import T0, _previous_execution, new_tenant, node, rows, seed
from tests.support.clocks import ManualClock


async def _executions(db: Database, job_id: UUID) -> dict:
    found = await rows(
        db, "SELECT scheduled_for, state, skip_reason, error FROM executions WHERE job_id = :j", j=job_id
    )
    return {r.scheduled_for: (r.state, r.skip_reason) for r in found}


async def _buffered(db: Database, job_id: UUID):
    [job] = await rows(db, "SELECT buffered_at FROM jobs WHERE job_id = :j", j=job_id)
    return job.buffered_at


@pytest.mark.parametrize("settled", ["succeeded", "dead", "cancelled"])
async def test_one_occurrence_waits_for_the_running_one_and_starts_when_it_settles(db: Database, settled: str) -> None:
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [job_id] = await seed(db, tenant, 1, T0, cron="* * * * *", concurrency="buffer_one")
    earlier = T0 - timedelta(minutes=1)
    await _previous_execution(db, job_id, tenant, "leased", earlier)
    starter = BufferStarter(db)

    await a.loader.run_once()
    await a.dispatcher.run_once()
    # T0 waits on the job row: no execution yet, so the lease never sees it; the chain goes on.
    assert await _executions(db, job_id) == {earlier: ("leased", None)}
    assert await _buffered(db, job_id) == T0
    [due] = await rows(db, "SELECT nominal_at FROM due_index WHERE job_id = :j", j=job_id)
    assert due.nominal_at == T0 + timedelta(minutes=1)
    assert (await starter.run_once()).started == 0  # the previous one still runs

    # The next occurrence finds one waiting already: recorded as skipped, like forbid's.
    clock.advance(60)
    await a.tick()
    assert (await _executions(db, job_id))[T0 + timedelta(minutes=1)] == ("skipped", "overlap")
    assert await _buffered(db, job_id) == T0

    await rows(
        db,
        "UPDATE executions SET state = :s, finished_at = now(), lease_owner = NULL, lease_until = NULL "
        "WHERE job_id = :j AND scheduled_for = :at RETURNING 1",
        s=settled,
        j=job_id,
        at=earlier,
    )
    assert (await starter.run_once()).started == 1
    assert (await _executions(db, job_id))[T0] == ("ready", None)
    assert await _buffered(db, job_id) is None
    [started] = await rows(
        db, "SELECT traceparent FROM executions WHERE job_id = :j AND scheduled_for = :at", j=job_id, at=T0
    )
    assert started.traceparent and started.traceparent.startswith("00-")  # its own trace, as a dispatch's
    assert (await starter.run_once()).started == 0  # started once


async def test_nothing_waits_when_nothing_runs_and_a_paused_jobs_waiting_occurrence_holds(db: Database) -> None:
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [idle, paused] = await seed(db, tenant, 2, T0, cron="* * * * *", concurrency="buffer_one")
    await _previous_execution(db, paused, tenant, "leased", T0 - timedelta(minutes=1))
    await a.loader.run_once()
    await a.dispatcher.run_once()
    assert (await _executions(db, idle))[T0] == ("ready", None)  # nothing ran: it runs at once
    assert await _buffered(db, idle) is None
    await rows(
        db,
        "UPDATE jobs SET state = 'paused', paused_at = now() WHERE job_id = :j RETURNING 1",
        j=paused,
    )
    await rows(
        db,
        "UPDATE executions SET state = 'succeeded', finished_at = now(), lease_owner = NULL, "
        "lease_until = NULL WHERE job_id = :j RETURNING 1",
        j=paused,
    )
    assert (await BufferStarter(db).run_once()).started == 0
    assert await _buffered(db, paused) == T0  # it starts after the resume


async def test_a_cancelled_jobs_waiting_occurrence_is_dropped_not_started(db: Database) -> None:
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [job_id] = await seed(db, tenant, 1, T0, cron="* * * * *", concurrency="buffer_one")
    await _previous_execution(db, job_id, tenant, "leased", T0 - timedelta(minutes=1))
    await a.loader.run_once()
    await a.dispatcher.run_once()
    assert await _buffered(db, job_id) == T0
    await rows(db, "UPDATE jobs SET state = 'cancelled' WHERE job_id = :j RETURNING 1", j=job_id)
    await rows(
        db,
        "UPDATE executions SET state = 'succeeded', finished_at = now(), lease_owner = NULL, "
        "lease_until = NULL WHERE job_id = :j RETURNING 1",
        j=job_id,
    )
    assert (await BufferStarter(db).run_once()).started == 0
    assert await _buffered(db, job_id) is None
    assert T0 not in await _executions(db, job_id)
