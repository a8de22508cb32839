"""How a job ends, against the embedded PostgreSQL: pause on failure (the fail path and the reaper) and
run limits (the dispatcher). Time is injected; nothing sleeps."""

from __future__ import annotations

from datetime import datetime, timedelta
from uuid import UUID

from app.store import executions as ex
from app.store.db import Database
from tests import factories
from tests.integration.test_scheduler_duties import T0, new_tenant, node, rows, seed
from tests.support.clocks import ManualClock


async def execute(db: Database, sql: str, **params) -> None:
    from sqlalchemy import text

    async def write(conn):
        await conn.execute(text(sql), params)

    await factories.raw(db, write)


async def recurring_job(db: Database, *, pause_on_failure: bool = True, max_attempts: int = 1) -> tuple[UUID, str]:
    """An active cron job with its due row (as a submit leaves it), and its queue."""
    tenant = await new_tenant(db)
    [job_id] = await seed(db, tenant, 1, T0, cron="*/5 * * * *")
    await execute(
        db,
        "UPDATE jobs SET pause_on_failure = :p, max_attempts = :m WHERE job_id = :j",
        p=pause_on_failure,
        m=max_attempts,
        j=job_id,
    )
    return job_id, factories.tenant_queue(tenant, "work")


async def leased_occurrence(db: Database, job_id: UUID, queue: str, at: datetime, *, lease_s: int = 30):
    [eid] = await factories.insert_ready(db, [job_id], [at])
    [held] = await db.transaction(lambda c: c.executions.lease(queue, "w", 1, lease_s))
    assert held.execution_id == str(eid)
    return eid, held


async def job_row(db: Database, job_id: UUID):
    [job] = await rows(
        db, "SELECT state, paused_at, paused_reason, version, run_count FROM jobs WHERE job_id = :j", j=job_id
    )
    return job


async def due_rows(db: Database, job_id: UUID) -> int:
    return len(await rows(db, "SELECT 1 FROM due_index WHERE job_id = :j", j=job_id))


# --- pause on failure ----------------------------------------------------------------------------


async def test_a_dead_letter_of_a_scheduled_occurrence_pauses_the_job_and_says_which(db: Database) -> None:
    job_id, queue = await recurring_job(db)
    before = await job_row(db, job_id)
    eid, held = await leased_occurrence(db, job_id, queue, T0 - timedelta(minutes=5))
    [out] = (
        await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "HTTP 500: down")]))
    ).values()
    assert out.state == "dead"
    job = await job_row(db, job_id)
    assert job.state == "paused" and job.paused_at is not None
    assert job.paused_reason == f"pauseOnFailure: execution {eid} was dead-lettered after 1 attempt: HTTP 500: down"
    assert job.version == before.version  # the tenant's version counts the tenant's changes only
    assert await due_rows(db, job_id) == 0  # as the API's pause: no occurrence is due while paused
    [marked] = await rows(db, "SELECT pause_execution_id FROM jobs WHERE job_id = :j", j=job_id)
    assert marked.pause_execution_id == eid  # the history marks it (app.api.jobs.views.execution_out)


async def test_a_retry_a_manual_run_or_a_job_without_the_option_does_not_pause(db: Database) -> None:
    retried, queue = await recurring_job(db, max_attempts=3)
    eid, held = await leased_occurrence(db, retried, queue, T0 - timedelta(minutes=5))
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "HTTP 500")]))
    assert (await job_row(db, retried)).state == "active"  # retried, not dead

    manual, queue = await recurring_job(db)
    [eid] = await factories.insert_ready(db, [manual], [T0 - timedelta(minutes=1)])
    await execute(db, "UPDATE executions SET trigger = 'manual' WHERE execution_id = :e", e=eid)
    [held] = await db.transaction(lambda c: c.executions.lease(queue, "w", 1, 30))
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "boom")]))
    assert (await job_row(db, manual)).state == "active"  # a manual run's dead letter leaves the schedule alone

    plain, queue = await recurring_job(db, pause_on_failure=False)
    eid, held = await leased_occurrence(db, plain, queue, T0 - timedelta(minutes=5))
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "boom", retryable=False)]))
    assert (await job_row(db, plain)).state == "active"


async def test_a_lease_that_expires_on_the_last_attempt_pauses_the_job(db: Database) -> None:
    job_id, queue = await recurring_job(db)
    eid, _held = await leased_occurrence(db, job_id, queue, T0 - timedelta(minutes=5), lease_s=1)
    later = datetime.now(T0.tzinfo) + timedelta(minutes=1)
    reaped = await db.transaction(lambda c: c.executions.reap_expired(10, now=later))
    assert reaped[ex.ExecutionState.DEAD] == 1
    job = await job_row(db, job_id)
    assert job.state == "paused" and str(eid) in job.paused_reason and "lease expired" in job.paused_reason


async def test_a_paused_job_keeps_the_reason_of_the_dead_letter_that_paused_it(db: Database) -> None:
    job_id, queue = await recurring_job(db)
    eid, held = await leased_occurrence(db, job_id, queue, T0 - timedelta(minutes=5))
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "first")]))
    eid2, held2 = await leased_occurrence(db, job_id, queue, T0 - timedelta(minutes=10))
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid2, held2.attempt, "second")]))
    assert str(eid) in (await job_row(db, job_id)).paused_reason  # the first dead letter paused it


# --- run limits ----------------------------------------------------------------------------------


async def test_a_schedule_completes_after_max_runs_occurrences(db: Database) -> None:
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [job_id] = await seed(db, tenant, 1, T0, cron="*/5 * * * *")
    await execute(db, "UPDATE jobs SET max_runs = 2 WHERE job_id = :j", j=job_id)
    await a.loader.run_once()
    assert (await a.dispatcher.run_once()).ready == 1
    assert ((await job_row(db, job_id)).state, (await job_row(db, job_id)).run_count) == ("active", 1)
    assert await due_rows(db, job_id) == 1
    clock.advance(timedelta(minutes=5))
    await a.leaser.run_once()
    await a.loader.run_once()
    assert (await a.dispatcher.run_once()).ready == 1
    job = await job_row(db, job_id)
    assert (job.state, job.run_count) == ("completed", 2)
    assert await due_rows(db, job_id) == 0
    runs = await rows(db, "SELECT scheduled_for FROM executions WHERE job_id = :j ORDER BY 1", j=job_id)
    assert [r.scheduled_for for r in runs] == [T0, T0 + timedelta(minutes=5)]


async def test_a_catch_up_stops_at_the_limit_and_skipped_occurrences_do_not_count(db: Database) -> None:
    clock = ManualClock(T0 + timedelta(minutes=30))
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    [job_id] = await seed(db, tenant, 1, T0, cron="*/5 * * * *", misfire="catch_up")
    await execute(db, "UPDATE jobs SET max_runs = 3, run_count = 1 WHERE job_id = :j", j=job_id)
    await a.loader.run_once()
    assert (await a.dispatcher.run_once()).ready == 2  # 7 occurrences were due; 2 were left under the limit
    job = await job_row(db, job_id)
    assert (job.state, job.run_count) == ("completed", 3)
    runs = await rows(db, "SELECT scheduled_for FROM executions WHERE job_id = :j ORDER BY 1", j=job_id)
    assert [r.scheduled_for for r in runs] == [T0, T0 + timedelta(minutes=5)]  # the oldest run first

    forbidden = (await seed(db, tenant, 1, T0 + timedelta(minutes=30), cron="*/5 * * * *", concurrency="forbid"))[0]
    await execute(db, "UPDATE jobs SET max_runs = 1 WHERE job_id = :j", j=forbidden)
    await factories.insert_ready(db, [forbidden], [T0])  # still unfinished: the due occurrence is skipped
    await a.loader.run_once()
    await a.dispatcher.run_once()
    job = await job_row(db, forbidden)
    assert (job.state, job.run_count) == ("active", 0)


async def test_an_occurrence_withdrawn_by_the_pause_no_longer_counts_toward_the_limit(db: Database) -> None:
    job_id, queue = await recurring_job(db)
    await execute(db, "UPDATE jobs SET max_runs = 5, run_count = 2 WHERE job_id = :j", j=job_id)
    eid, held = await leased_occurrence(db, job_id, queue, T0 - timedelta(minutes=5))
    ahead = datetime.now(T0.tzinfo) + timedelta(minutes=5)
    [withdrawn] = await factories.insert_ready(db, [job_id], [ahead])  # dispatched ahead, due later
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "down")]))
    job = await job_row(db, job_id)
    assert (job.state, job.run_count) == ("paused", 1)
    assert not await rows(db, "SELECT 1 FROM executions WHERE execution_id = :e", e=withdrawn)
