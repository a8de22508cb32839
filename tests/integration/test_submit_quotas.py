"""The submit writer's quotas against the real database: what is refused writes nothing.

The writer is driven directly with a clock the test moves, so the submit rate is exact; the REST
answers (429, Retry-After, problem bodies) are in tests/api/test_quotas.py.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone

import pytest
from sqlalchemy import text

from app import errors
from app.api.jobs import schemas, service
from app.api.jobs._quotas import ACTIVE_JOBS_RETRY_AFTER_S
from app.api.jobs.submit import Created, Submission, SubmitWriter, WriterConfig
from app.config import Settings
from app.store.db import Database
from tests.support.clocks import ManualClock

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def sub(tenant_id: uuid.UUID, name: str = "j", key: str | None = None) -> Submission:
    body = schemas.JobIn(
        name=name, target=schemas.TargetIn("queue", "pool"), schedule=schemas.ScheduleIn(run_at="2027-01-01T00:00:00Z")
    )
    return service.submission(body, Settings(), tenant_id, key, f"fp-{name}" if key else None, NOW)


async def new_tenant(db: Database, **quota: int | None) -> uuid.UUID:
    created = await db.transaction(lambda c: c.tenants.create(f"t-{uuid.uuid4().hex[:8]}"))
    assert created is not None
    tenant_id = created[0].tenant_id
    if quota:
        await db.transaction(lambda c: c.tenants.set_quota(tenant_id, **quota))  # type: ignore[arg-type]
    return tenant_id


async def rows(db: Database, tenant_id: uuid.UUID) -> tuple[int, int]:
    async with db.engine.connect() as conn:
        jobs = (await conn.execute(text("SELECT count(*) FROM jobs WHERE tenant_id = :t"), {"t": tenant_id})).scalar()
        due = (
            await conn.execute(text("SELECT count(*) FROM due_index WHERE tenant_id = :t"), {"t": tenant_id})
        ).scalar()
    return jobs, due


def quota_error(outcome: object, quota: str) -> errors.TenantQuotaExceeded:
    assert isinstance(outcome, errors.TenantQuotaExceeded), outcome
    assert outcome.quota == quota
    return outcome


async def test_a_tenant_without_quotas_is_not_limited(db: Database) -> None:
    tenant_id = await new_tenant(db)
    writer = SubmitWriter(db)
    outcomes = await writer.submit([sub(tenant_id, f"j{i}") for i in range(300)])
    assert all(isinstance(o, Created) for o in outcomes)
    assert await rows(db, tenant_id) == (300, 300)
    assert len(writer.rates) == 0  # no bucket was even made


async def test_the_active_jobs_quota_refuses_the_items_beyond_it_and_writes_none_of_them(db: Database) -> None:
    tenant_id = await new_tenant(db, max_active_jobs=5)
    other = await new_tenant(db)
    writer = SubmitWriter(db, WriterConfig(in_flight=1))
    first = await writer.submit([sub(tenant_id, f"a{i}") for i in range(3)])
    assert all(isinstance(o, Created) for o in first)
    # One batch of 4: 2 fit. Another tenant's request in the same transaction is not held back.
    batch, others = await asyncio.gather(
        writer.submit([sub(tenant_id, f"b{i}") for i in range(4)]),
        writer.submit([sub(other, f"o{i}") for i in range(4)]),
    )
    assert [isinstance(o, Created) for o in batch] == [True, True, False, False]
    refused = quota_error(batch[2], "maxActiveJobs")
    assert refused.limit == 5 and refused.retry_after_s == ACTIVE_JOBS_RETRY_AFTER_S
    assert all(isinstance(o, Created) for o in others)
    assert await rows(db, tenant_id) == (5, 5)
    assert await rows(db, other) == (4, 4)
    [single] = await writer.submit([sub(tenant_id, "c")])
    quota_error(single, "maxActiveJobs")
    assert await rows(db, tenant_id) == (5, 5)


async def test_ended_and_cancelled_jobs_free_the_quota(db: Database) -> None:
    tenant_id = await new_tenant(db, max_active_jobs=2)
    writer = SubmitWriter(db)
    made = await writer.submit([sub(tenant_id, "a"), sub(tenant_id, "b")])
    quota_error((await writer.submit([sub(tenant_id, "c")]))[0], "maxActiveJobs")
    assert isinstance(made[0], Created)
    await service.cancel(db, tenant_id, made[0].job_id)
    assert isinstance((await writer.submit([sub(tenant_id, "d")]))[0], Created)
    assert await rows(db, tenant_id) == (3, 2)  # the cancelled job's row stays; its due_index row went


async def test_a_retried_submit_at_the_quota_is_answered_as_the_first_time(db: Database) -> None:
    tenant_id = await new_tenant(db, max_active_jobs=1)
    writer = SubmitWriter(db)
    [first] = await writer.submit([sub(tenant_id, "a", key="k1")])
    [again] = await writer.submit([sub(tenant_id, "a", key="k1")])
    assert isinstance(first, Created) and isinstance(again, Created)
    assert again.replayed and again.job_id == first.job_id
    quota_error((await writer.submit([sub(tenant_id, "b", key="k2")]))[0], "maxActiveJobs")
    assert await rows(db, tenant_id) == (1, 1)


async def test_the_submit_rate_admits_what_the_bucket_holds_and_refuses_a_call_when_it_is_empty(db: Database) -> None:
    tenant_id = await new_tenant(db, max_submit_per_s=4)
    clock = ManualClock()
    writer = SubmitWriter(db, clock=clock)
    outcomes = await writer.submit([sub(tenant_id, f"a{i}") for i in range(6)])
    assert [isinstance(o, Created) for o in outcomes] == [True] * 4 + [False] * 2
    over = quota_error(outcomes[4], "maxSubmitPerSecond")
    assert over.limit == 4 and over.retry_after_s == 1
    with pytest.raises(errors.TenantQuotaExceeded) as whole:
        await writer.submit([sub(tenant_id, "b")])
    assert whole.value.quota == "maxSubmitPerSecond" and whole.value.retry_after_s == 1
    assert await rows(db, tenant_id) == (4, 4)
    clock.now += 0.5  # two tokens back
    again = await writer.submit([sub(tenant_id, f"c{i}") for i in range(3)])
    assert [isinstance(o, Created) for o in again] == [True, True, False]
    assert await rows(db, tenant_id) == (6, 6)


async def test_a_quota_change_applies_once_the_cached_quota_expires(db: Database) -> None:
    tenant_id = await new_tenant(db, max_active_jobs=1)
    writer = SubmitWriter(db, WriterConfig(quota_ttl_s=0.0))
    assert isinstance((await writer.submit([sub(tenant_id, "a")]))[0], Created)
    quota_error((await writer.submit([sub(tenant_id, "b")]))[0], "maxActiveJobs")
    await db.transaction(lambda c: c.tenants.set_quota(tenant_id, max_active_jobs=None))
    assert isinstance((await writer.submit([sub(tenant_id, "c")]))[0], Created)
