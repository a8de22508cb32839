"""The jobs service's lifecycle rules and the dispatcher's, on the in-memory store double.

No database: tests/support/memory_store.py stands in for it (and
tests/integration/test_store_double_contract.py holds it to the real store). The integration
tests of the same paths stay; these pin the rules themselves, fast.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest

from app import errors
from app.api.jobs import service
from app.domain.shards import SHARD_COUNT, due_minute, shard_of
from app.domain.states import ExecutionState, JobState
from app.scheduler.dispatcher import Dispatcher, DispatcherConfig
from app.scheduler.heap import DueEntry, DueHeap
from app.store import dispatch as d
from tests import factories
from tests.support.clocks import ManualClock
from tests.support.memory_store import MemoryDatabase


def now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


async def seeded(db: MemoryDatabase, tenant: UUID, **fields: Any) -> Any:
    job = factories.new_job(tenant, **fields)
    assert await db.transaction(lambda tx: tx.jobs.insert_many([job])) == {job.job_id}
    return job


async def history(db: MemoryDatabase, tenant: UUID, job_id: UUID) -> list[tuple[datetime, str, str | None]]:
    page = await db.transaction(lambda tx: tx.jobs.executions_page(tenant, job_id, before=None, limit=100))
    return [(e.scheduled_for, e.state, e.skip_reason) for e in page]


async def due_rows(db: MemoryDatabase) -> list[UUID]:
    far = now() + timedelta(days=365)
    return [
        r.job_id for r in await db.transaction(lambda tx: tx.dispatch.load_due(range(SHARD_COUNT), far, None, 1000))
    ]


# -- the jobs service: pause, resume, cancel ------------------------------------------------------------------


async def test_pausing_a_one_off_dispatched_ahead_takes_its_execution_back_and_remembers_its_time() -> None:
    db, at = MemoryDatabase(), now() + timedelta(seconds=30)
    tenant = db.add_tenant()
    job = await seeded(db, tenant, at=at)
    # What a dispatch ahead leaves: the due row claimed, the execution ready at its due time, the one-off completed.
    await db.transaction(lambda tx: tx.jobs.delete_due(job.job_id))
    await db.transaction(
        lambda tx: tx.dispatch.record(
            [d.NewExecution(job.job_id, tenant, job.queue, at, 3, ExecutionState.READY, at)],
            [],
            [d.JobAdvance(job.job_id, JobState.COMPLETED, None, None)],
        )
    )

    paused = await service.pause(db, tenant, job.job_id)  # type: ignore[arg-type]
    assert (paused.state, paused.next_nominal_at, paused.next_run_at) == (JobState.PAUSED, at, None)
    assert await history(db, tenant, job.job_id) == [] and await due_rows(db) == []
    assert (await service.pause(db, tenant, job.job_id)).version == paused.version  # type: ignore[arg-type]


async def test_a_cancelled_job_cannot_be_paused_or_resumed_and_nothing_changes() -> None:
    db = MemoryDatabase()
    tenant = db.add_tenant()
    job = await seeded(db, tenant, at=now() + timedelta(minutes=5))
    await service.cancel(db, tenant, job.job_id)  # type: ignore[arg-type]
    before = await db.transaction(lambda tx: tx.jobs.get(tenant, job.job_id))
    with pytest.raises(errors.InvalidStateTransition):
        await service.pause(db, tenant, job.job_id)  # type: ignore[arg-type]
    with pytest.raises(errors.InvalidStateTransition):
        await service.resume(db, tenant, job.job_id, "skip")  # type: ignore[arg-type]
    assert await db.transaction(lambda tx: tx.jobs.get(tenant, job.job_id)) == before
    with pytest.raises(errors.JobNotFound):
        await service.pause(db, db.add_tenant(), job.job_id)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("missed", "state", "skipped"), [("skip", JobState.COMPLETED, ["paused"]), ("run_once", JobState.ACTIVE, [])]
)
async def test_resuming_a_one_off_whose_time_passed_runs_it_now_or_records_it_skipped(
    missed: str, state: JobState, skipped: list[str]
) -> None:
    db, at = MemoryDatabase(), now() - timedelta(minutes=1)
    tenant = db.add_tenant()
    job = await seeded(db, tenant, at=at)
    await service.pause(db, tenant, job.job_id)  # type: ignore[arg-type]
    resumed = await service.resume(db, tenant, job.job_id, missed)  # type: ignore[arg-type]
    assert resumed.state == state
    assert [reason for _, _, reason in await history(db, tenant, job.job_id)] == skipped
    assert await due_rows(db) == ([job.job_id] if state == JobState.ACTIVE else [])
    if state == JobState.ACTIVE:
        assert resumed.next_nominal_at == at and resumed.next_run_at is not None and resumed.next_run_at > at


async def test_cancel_cancels_what_no_worker_holds_and_removes_the_next_occurrence() -> None:
    db = MemoryDatabase()
    tenant = db.add_tenant()
    job = await seeded(db, tenant, at=now() + timedelta(minutes=1))
    earlier = now() - timedelta(minutes=1)
    await db.transaction(
        lambda tx: tx.dispatch.record(
            [d.NewExecution(job.job_id, tenant, job.queue, earlier, 3, ExecutionState.READY, earlier)], [], []
        )
    )
    await service.cancel(db, tenant, job.job_id)  # type: ignore[arg-type]
    await service.cancel(db, tenant, job.job_id)  # type: ignore[arg-type]  # again: nothing more to do
    got = await db.transaction(lambda tx: tx.jobs.get(tenant, job.job_id))
    assert (got.state, got.next_run_at, got.has_open, got.last_outcome) == (
        JobState.CANCELLED,
        None,
        False,
        ExecutionState.CANCELLED,
    )
    assert await due_rows(db) == []


# -- the dispatcher ---------------------------------------------------------------------------------------------

T0 = datetime(2027, 3, 1, 12, 0, tzinfo=timezone.utc)


async def scheduler(db: MemoryDatabase, clock: ManualClock, owner: str = "a") -> tuple[Dispatcher, dict[int, int]]:
    held = await db.transaction(lambda tx: tx.shard_leases.acquire(owner, SHARD_COUNT, 60.0, now=clock.wall()))
    return (
        Dispatcher(db, owner, DueHeap(), DispatcherConfig(ahead_s=0.0), clock.wall),  # type: ignore[arg-type]
        {h.shard_id: h.revision for h in held},
    )


def entry(job: Any, revision: int, *, at: datetime | None = None) -> DueEntry:
    at = at or job.next_run_at
    return DueEntry(shard_of(job.job_id), revision, due_minute(at), at, job.job_id, job.tenant_id, at)


async def test_a_due_one_off_becomes_one_ready_execution_and_its_job_completes() -> None:
    db, clock = MemoryDatabase(), ManualClock(T0)
    tenant = db.add_tenant()
    job = await seeded(db, tenant, at=T0)
    dispatcher, revisions = await scheduler(db, clock)
    dispatcher.heap.add([entry(job, revisions[shard_of(job.job_id)])])
    result = await dispatcher.run_once()
    assert (result.claimed, result.ready, result.fenced, result.failed) == (1, 1, 0, 0)
    assert await history(db, tenant, job.job_id) == [(T0, ExecutionState.READY, None)]
    got = await db.transaction(lambda tx: tx.jobs.get(tenant, job.job_id))
    assert (got.state, got.has_open) == (JobState.COMPLETED, True)
    assert await due_rows(db) == []


async def test_a_shard_taken_over_since_loading_fences_the_batch_and_leaves_the_row_to_its_new_owner() -> None:
    db, clock = MemoryDatabase(), ManualClock(T0)
    tenant = db.add_tenant()
    job = await seeded(db, tenant, at=T0)
    dispatcher, revisions = await scheduler(db, clock)
    dispatcher.heap.add([entry(job, revisions[shard_of(job.job_id)] - 1)])  # loaded under an older lease
    result = await dispatcher.run_once()
    assert (result.claimed, result.fenced, result.ready) == (0, 1, 0)
    assert await history(db, tenant, job.job_id) == [] and await due_rows(db) == [job.job_id]


@pytest.mark.parametrize(
    ("concurrency", "old_state", "new_state"),
    [
        ("forbid", ExecutionState.READY, ExecutionState.SKIPPED),
        ("replace", ExecutionState.CANCELLED, ExecutionState.READY),
        ("allow", ExecutionState.READY, ExecutionState.READY),
    ],
)
async def test_a_cron_occurrence_due_while_the_last_is_unfinished_follows_the_overlap_policy(
    concurrency: str, old_state: ExecutionState, new_state: ExecutionState
) -> None:
    db, clock = MemoryDatabase(), ManualClock(T0)
    tenant = db.add_tenant()
    job = await seeded(
        db,
        tenant,
        at=T0,
        schedule_kind="cron",
        run_at=None,
        cron="* * * * *",
        cron_resolved="* * * * *",
        tz="UTC",
        concurrency=concurrency,
    )
    previous = T0 - timedelta(minutes=1)
    await db.transaction(
        lambda tx: tx.dispatch.record(
            [d.NewExecution(job.job_id, tenant, job.queue, previous, 3, ExecutionState.READY, previous)], [], []
        )
    )
    dispatcher, revisions = await scheduler(db, clock)
    dispatcher.heap.add([entry(job, revisions[shard_of(job.job_id)])])
    await dispatcher.run_once()
    assert [(at, state) for at, state, _ in await history(db, tenant, job.job_id)] == [
        (T0, new_state),
        (previous, old_state),
    ]
    got = await db.transaction(lambda tx: tx.jobs.get(tenant, job.job_id))
    assert (got.state, got.next_nominal_at) == (JobState.ACTIVE, T0 + timedelta(minutes=1))
    assert await due_rows(db) == [job.job_id]  # the chain goes on
