"""The in-memory store double (tests/support/memory_store.py) answers as the real store does.

Every test runs twice, on the real store over the embedded PostgreSQL and on the double, with the
same assertions: a method of the double that drifts from its SQL fails here. Times are passed as
``now`` wherever the seam takes one; what the database clock alone sets (``updated_at``) is only
compared with itself.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest

from app import errors
from app.domain.shards import SHARD_COUNT, due_minute, shard_of
from app.domain.states import ExecutionState, JobState
from app.scheduler.heap import DueEntry
from app.store import dispatch as d
from app.store.db import Database, create_engine
from app.store.jobs import ExecutionCounts
from tests import factories
from tests.support.memory_store import MemoryDatabase

T0 = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)  # ahead of the database clock


@dataclass
class Backend:
    db: Any  # Database or MemoryDatabase: the same seam
    tenant: Callable[[], Awaitable[UUID]]

    async def tx(self, work: Callable[[Any], Awaitable[Any]]) -> Any:
        return await self.db.transaction(work)


@pytest.fixture(params=["postgres", "memory"])
async def store(request: pytest.FixtureRequest, pg_template: str) -> AsyncIterator[Backend]:
    if request.param == "memory":
        memory = MemoryDatabase()

        async def memory_tenant() -> UUID:
            return memory.add_tenant()

        yield Backend(memory, memory_tenant)
        return
    db = Database(create_engine(request.getfixturevalue("database_url"), isolation="SERIALIZABLE", pool_size=2))

    async def real_tenant() -> UUID:
        return (await factories.tenant(db)).tenant_id

    yield Backend(db, real_tenant)
    await db.close()


async def insert(store: Backend, *jobs: Any) -> set[UUID]:
    return await store.tx(lambda tx: tx.jobs.insert_many(list(jobs)))


def execution(
    job: Any, at: datetime, *, ready_at: datetime | None = None, state: ExecutionState = ExecutionState.READY
) -> d.NewExecution:
    return d.NewExecution(
        job.job_id,
        job.tenant_id,
        job.queue,
        at,
        job.max_attempts,
        state,
        ready_at or at,
        skip_reason="dry_run" if state == ExecutionState.SKIPPED else None,
    )


async def record(store: Backend, *executions: d.NewExecution, now: datetime = T0) -> d.Recorded:
    return await store.tx(lambda tx: tx.dispatch.record(list(executions), [], [], now))


async def test_insert_many_keeps_one_job_per_idempotency_key_and_a_due_row_per_job(store: Backend) -> None:
    tenant = await store.tenant()
    first = factories.new_job(tenant, at=T0, idempotency_key="k1", request_hash="h")
    twin = factories.new_job(tenant, at=T0, idempotency_key="k1", request_hash="h")
    other = factories.new_job(tenant, at=T0 + timedelta(seconds=30), name="other", labels={"team": "a"})
    assert await insert(store, first, twin, other) == {first.job_id, other.job_id}
    assert await insert(store, factories.new_job(tenant, at=T0, idempotency_key="k1", request_hash="h2")) == set()

    job = await store.tx(lambda tx: tx.jobs.get(tenant, other.job_id))
    assert (job.name, job.state, job.version, job.next_run_at, job.next_nominal_at, job.first_run_at) == (
        "other",
        JobState.ACTIVE,
        1,
        T0 + timedelta(seconds=30),
        T0 + timedelta(seconds=30),
        T0 + timedelta(seconds=30),
    )
    assert (job.payload, job.labels, job.paused_at, job.last_outcome, job.has_open) == (
        {"hello": "world"},
        {"team": "a"},
        None,
        None,
        False,
    )
    assert job.created_at == job.updated_at
    assert await store.tx(lambda tx: tx.jobs.get(uuid.uuid4(), other.job_id)) is None  # another tenant's

    due = await store.tx(lambda tx: tx.dispatch.load_due(range(SHARD_COUNT), T0 + timedelta(minutes=1), None, 10))
    assert [(r.job_id, r.shard_id, r.due_minute, r.next_run_at, r.nominal_at, r.weight) for r in due] == [
        (j.job_id, shard_of(j.job_id), due_minute(j.next_run_at), j.next_run_at, j.next_nominal_at, 1)
        for j in sorted([first, other], key=lambda j: (j.next_run_at, j.job_id))
    ]
    assert await store.tx(lambda tx: tx.dispatch.load_due(range(SHARD_COUNT), T0, None, 10)) == due[:1]


async def test_set_state_is_guarded_on_state_version_and_updated_at(store: Backend) -> None:
    tenant = await store.tenant()
    new = factories.new_job(tenant, at=T0)
    await insert(store, new)
    job = await store.tx(lambda tx: tx.jobs.get(tenant, new.job_id, for_update=True))
    paused = await store.tx(lambda tx: tx.jobs.set_state(job, JobState.PAUSED, next_nominal_at=T0, next_run_at=None))
    assert (paused.state, paused.version, paused.next_nominal_at, paused.next_run_at) == (JobState.PAUSED, 2, T0, None)
    assert paused.paused_at is not None and paused.updated_at == paused.paused_at
    # The job as read before the pause is stale: the guard refuses it and nothing changes.
    assert (
        await store.tx(lambda tx: tx.jobs.set_state(job, JobState.CANCELLED, next_nominal_at=None, next_run_at=None))
        is None
    )
    active = await store.tx(lambda tx: tx.jobs.set_state(paused, JobState.ACTIVE, next_nominal_at=T0, next_run_at=T0))
    assert (active.state, active.version, active.paused_at) == (JobState.ACTIVE, 3, None)


async def test_a_job_has_one_due_row(store: Backend) -> None:
    tenant = await store.tenant()
    new = factories.new_job(tenant, at=T0)
    await insert(store, new)
    with pytest.raises(errors.StoreConflict):
        await store.tx(lambda tx: tx.jobs.insert_due(new.job_id, tenant, T0, T0))
    assert await store.tx(lambda tx: tx.jobs.delete_due(new.job_id)) is True
    assert await store.tx(lambda tx: tx.jobs.delete_due(new.job_id)) is False
    await store.tx(lambda tx: tx.jobs.insert_due(new.job_id, tenant, T0, T0 + timedelta(minutes=2)))
    [row] = await store.tx(lambda tx: tx.dispatch.load_due(range(SHARD_COUNT), T0 + timedelta(hours=1), None, 10))
    assert (row.next_run_at, row.due_minute, row.nominal_at) == (
        T0 + timedelta(minutes=2),
        due_minute(T0 + timedelta(minutes=2)),
        T0,
    )


async def test_an_occurrence_is_recorded_once_and_a_pause_withdraws_only_what_is_not_due(store: Backend) -> None:
    tenant = await store.tenant()
    new = factories.new_job(tenant, at=T0)
    await insert(store, new)
    due_now, ahead = execution(new, T0 - timedelta(seconds=5)), execution(new, T0 + timedelta(seconds=20))
    skipped = execution(new, T0 - timedelta(seconds=60), state=ExecutionState.SKIPPED)
    assert await record(store, due_now, ahead, skipped) == d.Recorded(2, 1, 0, 0)
    assert await record(store, due_now) == d.Recorded(0, 0, 0, 0)  # ON CONFLICT (job_id, scheduled_for)

    job = await store.tx(lambda tx: tx.jobs.get(tenant, new.job_id))
    assert (job.has_open, job.last_outcome) == (True, ExecutionState.SKIPPED)
    assert await store.tx(lambda tx: tx.jobs.withdraw_ahead(tenant, new.job_id, T0)) == [T0 + timedelta(seconds=20)]
    assert await store.tx(lambda tx: tx.jobs.withdraw_ahead(tenant, new.job_id, T0)) == []
    assert await store.tx(lambda tx: tx.jobs.execution_counts(tenant, new.job_id)) == counts(pending=1, skipped=1)
    # The newest only (GET /v1/jobs/{id}): the occurrence due now, not the skipped one before it.
    assert await store.tx(lambda tx: tx.jobs.execution_counts(tenant, new.job_id, newest=1)) == counts(pending=1)

    assert await store.tx(lambda tx: tx.jobs.cancel_unstarted(tenant, new.job_id)) == 1
    job = await store.tx(lambda tx: tx.jobs.get(tenant, new.job_id))
    assert (job.has_open, job.last_outcome) == (False, ExecutionState.CANCELLED)
    assert await store.tx(lambda tx: tx.jobs.execution_counts(tenant, new.job_id)) == counts(cancelled=1, skipped=1)


def counts(**by: int) -> ExecutionCounts:
    return ExecutionCounts(**{"succeeded": 0, "dead": 0, "cancelled": 0, "skipped": 0, "pending": 0, **by})


async def test_skipped_occurrences_and_the_history_page(store: Backend) -> None:
    tenant = await store.tenant()
    new = factories.new_job(tenant, at=T0)
    await insert(store, new)
    times = [T0 - timedelta(minutes=m) for m in (3, 1, 2)]
    await store.tx(lambda tx: tx.jobs.record_skipped(new.job_id, tenant, new.queue, 3, times, "paused"))
    await store.tx(lambda tx: tx.jobs.record_skipped(new.job_id, tenant, new.queue, 3, times[:1], "paused"))
    page = await store.tx(lambda tx: tx.jobs.executions_page(tenant, new.job_id, before=None, limit=2))
    assert [(e.scheduled_for, e.state, e.skip_reason, e.attempt, e.trigger, e.error) for e in page] == [
        (T0 - timedelta(minutes=1), ExecutionState.SKIPPED, "paused", 0, "schedule", None),
        (T0 - timedelta(minutes=2), ExecutionState.SKIPPED, "paused", 0, "schedule", None),
    ]
    rest = await store.tx(
        lambda tx: tx.jobs.executions_page(
            tenant, new.job_id, before=(page[-1].scheduled_for, page[-1].execution_id), limit=2
        )
    )
    assert [e.scheduled_for for e in rest] == [T0 - timedelta(minutes=3)]


async def test_shard_leases_are_taken_in_the_salted_order_and_renewed_while_live(store: Backend) -> None:
    a = await store.tx(lambda tx: tx.shard_leases.acquire("a", 3, 10.0, salt=7, now=T0))
    assert [(h.shard_id, h.revision) for h in sorted(a, key=lambda h: h.shard_id)] == sorted(
        (s, 1) for s in sorted(range(SHARD_COUNT), key=lambda s: (s * 167 + 7) % 256)[:3]
    )
    b = await store.tx(lambda tx: tx.shard_leases.acquire("b", 300, 10.0, now=T0 + timedelta(seconds=1)))
    assert len(b) == SHARD_COUNT - 3 and not {h.shard_id for h in a} & {h.shard_id for h in b}
    assert await store.tx(lambda tx: tx.shard_leases.acquire("c", 5, 10.0, now=T0 + timedelta(seconds=2))) == []

    renewed = await store.tx(lambda tx: tx.shard_leases.renew("a", 10.0, now=T0 + timedelta(seconds=9)))
    assert sorted(renewed, key=lambda h: h.shard_id) == sorted(a, key=lambda h: h.shard_id)
    # b's leases ended at T0+11 s; after a grace of 2 s they may be taken, each with a new revision.
    late = T0 + timedelta(seconds=12)
    assert await store.tx(lambda tx: tx.shard_leases.renew("b", 10.0, now=late)) == []
    assert await store.tx(lambda tx: tx.shard_leases.acquire("c", 300, 10.0, now=late, grace_s=2.0)) == []
    taken = await store.tx(lambda tx: tx.shard_leases.acquire("c", 300, 10.0, now=late, grace_s=0.5))
    assert {h.shard_id for h in taken} == {h.shard_id for h in b} and {h.revision for h in taken} == {2}
    leases = await store.tx(lambda tx: tx.shard_leases.list_all())
    assert [(lease.owner, lease.lease_until) for lease in leases if lease.shard_id == a[0].shard_id] == [
        ("a", T0 + timedelta(seconds=19))
    ]


async def all_shards(store: Backend, owner: str, now: datetime = T0) -> dict[int, int]:
    held = await store.tx(lambda tx: tx.shard_leases.acquire(owner, SHARD_COUNT, 60.0, now=now))
    return {h.shard_id: h.revision for h in held}


def key(job: Any, revision: int) -> DueEntry:
    return DueEntry(
        shard_of(job.job_id),
        revision,
        due_minute(job.next_run_at),
        job.next_run_at,
        job.job_id,
        job.tenant_id,
        job.next_nominal_at,
    )


async def test_a_claim_takes_a_due_row_once_and_only_under_the_shard_revision_it_was_loaded_with(
    store: Backend,
) -> None:
    tenant = await store.tenant()
    revisions = await all_shards(store, "a")
    forbid = factories.new_job(tenant, at=T0, concurrency="forbid", name="forbid")
    plain = factories.new_job(tenant, at=T0, name="plain")
    await insert(store, forbid, plain)
    await record(store, execution(forbid, T0 - timedelta(minutes=5)))  # still open: the next one overlaps

    stale = key(plain, revisions[shard_of(plain.job_id)] + 1)
    claims = await store.tx(
        lambda tx: tx.dispatch.claim("a", [key(forbid, revisions[shard_of(forbid.job_id)]), stale], T0)
    )
    assert [(c.job_id, c.claimed, c.fenced) for c in claims] == [
        (forbid.job_id, True, False),
        (plain.job_id, False, True),
    ]
    c = claims[0]
    assert (
        c.tenant_id,
        c.nominal_at,
        c.job_state,
        c.schedule_kind,
        c.concurrency,
        c.misfire,
        c.queue,
        c.max_attempts,
        c.overlapping,
        c.dry_run,
    ) == (tenant, T0, JobState.ACTIVE, "once", "forbid", "run_once", forbid.queue, 3, True, False)
    assert claims[1].overlapping is False and claims[1].job_state is None and claims[1].tenant_id is None

    again = await store.tx(lambda tx: tx.dispatch.claim("a", [key(forbid, revisions[shard_of(forbid.job_id)])], T0))
    assert [(c.claimed, c.fenced) for c in again] == [(False, False)]  # vanished: claimed already
    expired = await store.tx(
        lambda tx: tx.dispatch.claim("a", [key(plain, revisions[shard_of(plain.job_id)])], T0 + timedelta(seconds=61))
    )
    assert [(c.claimed, c.fenced) for c in expired] == [(False, True)]
    mine = await store.tx(lambda tx: tx.dispatch.claim("a", [key(plain, revisions[shard_of(plain.job_id)])], T0))
    assert [(c.claimed, c.overlapping) for c in mine] == [(True, False)]


async def test_replacing_cancels_the_older_open_executions_and_the_record_advances_active_jobs_only(
    store: Backend,
) -> None:
    tenant = await store.tenant()
    job, paused = factories.new_job(tenant, at=T0), factories.new_job(tenant, at=T0, name="paused")
    await insert(store, job, paused)
    times = [T0 - timedelta(minutes=m) for m in (3, 2)]
    await record(store, *(execution(job, t) for t in times), execution(job, T0 + timedelta(minutes=1)))
    await store.tx(lambda tx: tx.dispatch.cancel_replaced([d.Replacement(job.job_id, T0, "replaced by newer")], T0))
    page = await store.tx(lambda tx: tx.jobs.executions_page(tenant, job.job_id, before=None, limit=10))
    assert [(e.scheduled_for, e.state, e.error, e.finished_at) for e in page] == [
        (T0 + timedelta(minutes=1), ExecutionState.READY, None, None),
        (times[1], ExecutionState.CANCELLED, "replaced by newer", T0),
        (times[0], ExecutionState.CANCELLED, "replaced by newer", T0),
    ]

    row = await store.tx(lambda tx: tx.jobs.get(tenant, paused.job_id, for_update=True))
    await store.tx(lambda tx: tx.jobs.set_state(row, JobState.PAUSED, next_nominal_at=T0, next_run_at=None))
    await store.tx(lambda tx: tx.jobs.delete_due(job.job_id))
    nxt = T0 + timedelta(minutes=5)
    recorded = await store.tx(
        lambda tx: tx.dispatch.record(
            [],
            [
                d.NextDue(shard_of(job.job_id), due_minute(nxt), nxt, job.job_id, tenant, nxt),
                d.NextDue(shard_of(paused.job_id), due_minute(nxt), nxt, paused.job_id, tenant, nxt),
            ],
            [
                d.JobAdvance(job.job_id, JobState.ACTIVE, nxt, nxt),
                d.JobAdvance(paused.job_id, JobState.COMPLETED, None, None),
            ],
            T0,
        )
    )
    assert recorded == d.Recorded(0, 0, 1, 1)  # paused's due row stays; the paused job keeps its state
    moved = await store.tx(lambda tx: tx.jobs.get(tenant, job.job_id))
    kept = await store.tx(lambda tx: tx.jobs.get(tenant, paused.job_id))
    assert (moved.state, moved.next_run_at, moved.version, moved.updated_at) == (JobState.ACTIVE, nxt, 1, T0)
    assert (kept.state, kept.next_run_at) == (JobState.PAUSED, None)


async def test_a_buffered_occurrence_waits_on_the_job_and_starts_once_nothing_of_the_job_is_open(
    store: Backend,
) -> None:
    tenant = await store.tenant()
    revisions = await all_shards(store, "a")
    job = factories.new_job(tenant, at=T0, concurrency="buffer_one", name="buffered")
    await insert(store, job)
    running = execution(job, T0 - timedelta(minutes=5))
    await record(store, running)
    [claim] = await store.tx(lambda tx: tx.dispatch.claim("a", [key(job, revisions[shard_of(job.job_id)])], T0))
    assert (claim.concurrency, claim.overlapping, claim.buffered_at) == ("buffer_one", True, None)
    nxt = T0 + timedelta(minutes=5)
    await store.tx(
        lambda tx: tx.dispatch.record([], [], [d.JobAdvance(job.job_id, JobState.ACTIVE, nxt, nxt, buffered_at=T0)], T0)
    )
    assert (await store.tx(lambda tx: tx.jobs.get(tenant, job.job_id))).buffered_at == T0
    assert await store.tx(lambda tx: tx.dispatch.lock_buffered(10)) == []  # the previous one is open
    await store.tx(lambda tx: tx.dispatch.cancel_replaced([d.Replacement(job.job_id, T0, "settled for the test")], T0))
    [locked] = await store.tx(lambda tx: tx.dispatch.lock_buffered(10))
    assert (locked.job_id, locked.buffered_at, locked.job_state) == (job.job_id, T0, JobState.ACTIVE)
    trace = "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01"
    start = [d.BufferedOutcome(True, trace)]
    assert await store.tx(lambda tx: tx.dispatch.start_buffered([locked], start, T0)) == [(job.job_id, T0, "ready")]
    # Started once: a second start of what was locked then finds the job's buffer empty.
    assert await store.tx(lambda tx: tx.dispatch.start_buffered([locked], start, T0)) == []
    assert (await store.tx(lambda tx: tx.jobs.get(tenant, job.job_id))).buffered_at is None
    page = await store.tx(lambda tx: tx.jobs.executions_page(tenant, job.job_id, before=None, limit=10))
    assert [(e.scheduled_for, e.state) for e in page] == [
        (T0, ExecutionState.READY),
        (T0 - timedelta(minutes=5), ExecutionState.CANCELLED),
    ]
    assert await store.tx(lambda tx: tx.dispatch.lock_buffered(10)) == []
