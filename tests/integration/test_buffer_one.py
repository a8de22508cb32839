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


async def test_nothing_waits_when_nothing_runs_and_a_pause_drops_the_waiting_occurrence(db: Database) -> None:
    """Temporal drops a buffered start the schedule cannot take because it is paused: recorded here as skipped
    (reason paused), like the occurrences that fall in the pause; the resume does not bring it back."""
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
    result = await BufferStarter(db).run_once()
    assert (result.started, result.settled) == (0, 1)
    assert await _buffered(db, paused) is None
    assert (await _executions(db, paused))[T0] == ("skipped", "paused")


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


async def _job(db: Database, job_id: UUID):
    [job] = await rows(
        db,
        "SELECT state, next_run_at, next_nominal_at, buffered_at, run_count FROM jobs WHERE job_id = :j",
        j=job_id,
    )
    return job


@pytest.mark.parametrize("ends_by", ["end_at", "max_runs"])
async def test_a_schedule_that_ends_with_an_occurrence_waiting_completes_when_that_one_starts(
    db: Database, ends_by: str
) -> None:
    """The waiting occurrence is still going to run: the job stays active (nothing further due) until it
    starts, and completes then. Under maxRuns it counts when it starts (Temporal's remaining actions are
    spent by a start), so the limit is never passed by a buffered one."""
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [job_id] = await seed(db, tenant, 1, T0, cron="* * * * *", concurrency="buffer_one")
    earlier = T0 - timedelta(minutes=1)
    await _previous_execution(db, job_id, tenant, "leased", earlier)
    if ends_by == "end_at":
        await rows(db, "UPDATE jobs SET end_at = :at WHERE job_id = :j RETURNING 1", at=T0, j=job_id)
    else:  # the running one was the first of two
        await rows(db, "UPDATE jobs SET max_runs = 2, run_count = 1 WHERE job_id = :j RETURNING 1", j=job_id)
    await a.loader.run_once()
    await a.dispatcher.run_once()
    job = await _job(db, job_id)
    assert (job.state, job.buffered_at) == ("active", T0)
    if ends_by == "max_runs":
        assert job.run_count == 1  # not started yet: not counted
    assert await _reads(db, tenant, job_id) == ("active", ["active"])  # GET and ?state= agree
    starter = BufferStarter(db)
    assert (await starter.run_once()).started == 0
    assert (await _job(db, job_id)).state == "active"

    await rows(
        db,
        "UPDATE executions SET state = 'succeeded', finished_at = now(), lease_owner = NULL, lease_until = NULL "
        "WHERE job_id = :j AND scheduled_for = :at RETURNING 1",
        j=job_id,
        at=earlier,
    )
    assert (await starter.run_once()).started == 1
    job = await _job(db, job_id)
    assert (job.state, job.buffered_at, job.next_run_at, job.next_nominal_at) == ("completed", None, None, None)
    assert not await rows(db, "SELECT 1 FROM due_index WHERE job_id = :j", j=job_id)
    if ends_by == "max_runs":
        assert job.run_count == 2
    assert await _reads(db, tenant, job_id) == ("active", ["active"])  # its last execution is still to finish
    await rows(
        db,
        "UPDATE executions SET state = 'succeeded', finished_at = now() WHERE job_id = :j AND scheduled_for = :at "
        "RETURNING 1",
        j=job_id,
        at=T0,
    )
    assert await _reads(db, tenant, job_id) == ("completed", ["completed"])
    clock.advance(120)
    await a.tick()
    assert set(await _executions(db, job_id)) == {earlier, T0}  # nothing runs past the end


async def _reads(db: Database, tenant: UUID, job_id: UUID) -> tuple[str, list[str]]:
    """The job's state as GET reports it, and the ?state= filters whose page lists it."""
    job = await db.transaction(lambda tx: tx.jobs.get(tenant, job_id))
    assert job is not None
    listed = []
    for state in ("active", "paused", "completed", "failed", "cancelled"):
        page = await db.transaction(
            lambda tx, s=state: tx.jobs.list_page(tenant, state=s, name=None, after=None, limit=10)
        )
        if any(j.job_id == job_id for j in page):
            listed.append(state)
    return job.reported_state, listed


@pytest.mark.parametrize(
    ("policy", "waiting", "previous"),
    [
        ("allow", ("ready", None), "leased"),  # starts at once beside the running one
        ("forbid", ("skipped", "overlap"), "leased"),  # the running one keeps the job: recorded as skipped
        ("replace", ("ready", None), "cancelled"),  # the running one is cancelled for it
    ],
)
async def test_an_update_of_the_overlap_policy_decides_the_waiting_occurrence_by_the_new_policy(
    db: Database, policy: str, waiting: tuple, previous: str
) -> None:
    """Temporal resolves a scheduled start's overlap policy when it processes the buffer, so an update that
    changes the policy while one waits decides it by the new one, within a BufferStarter pass."""
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [job_id] = await seed(db, tenant, 1, T0, cron="* * * * *", concurrency="buffer_one")
    earlier = T0 - timedelta(minutes=1)
    await _previous_execution(db, job_id, tenant, "leased", earlier)
    await a.loader.run_once()
    await a.dispatcher.run_once()
    assert await _buffered(db, job_id) == T0
    await rows(db, "UPDATE jobs SET concurrency = :c WHERE job_id = :j RETURNING 1", c=policy, j=job_id)
    result = await BufferStarter(db).run_once()
    assert result.settled == 1 and result.started == (waiting[0] == "ready")
    found = await _executions(db, job_id)
    assert found[T0] == waiting and found[earlier][0] == previous
    assert await _buffered(db, job_id) is None


async def test_a_dead_letter_that_pauses_the_job_drops_the_waiting_occurrence(db: Database) -> None:
    """pauseOnFailure with buffer_one: the previous occurrence's dead letter pauses the job (the Fail's own
    transaction), and the waiting one is then recorded as skipped (paused), never started; the resume does not
    bring it back."""
    from app.store import executions as ex

    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [job_id] = await seed(db, tenant, 1, T0, cron="* * * * *", concurrency="buffer_one")
    await rows(db, "UPDATE jobs SET pause_on_failure = true WHERE job_id = :j RETURNING 1", j=job_id)
    earlier = T0 - timedelta(minutes=1)
    await _previous_execution(db, job_id, tenant, "leased", earlier)
    await a.loader.run_once()
    await a.dispatcher.run_once()
    assert await _buffered(db, job_id) == T0
    [previous] = await rows(db, "SELECT execution_id FROM executions WHERE job_id = :j", j=job_id)
    await db.transaction(lambda tx: tx.executions.fail_many([ex.Failure(previous.execution_id, 1, "boom", False)]))
    assert (await _job(db, job_id)).state == "paused"
    result = await BufferStarter(db).run_once()
    assert (result.started, result.settled) == (0, 1)
    assert (await _executions(db, job_id))[T0] == ("skipped", "paused")
    assert await _buffered(db, job_id) is None
