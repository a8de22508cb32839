"""The API's group-committing submit writer against the real database."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone

import pytest
from sqlalchemy import bindparam, text

from app import errors
from app.api.jobs import schemas, service
from app.api.jobs._quotas import CriticalTenants
from app.api.jobs.submit import CROWDED_MEMO_S, Created, SubmitWriter, WriterConfig
from app.config import Settings
from app.store.db import Database

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


def job(name: str) -> schemas.JobIn:
    return schemas.JobIn(
        name=name, target=schemas.TargetIn("queue", "pool"), schedule=schemas.ScheduleIn(run_at="2027-01-01T00:00:00Z")
    )


async def new_tenant(db: Database) -> uuid.UUID:
    created = await db.transaction(lambda c: c.tenants.create(f"t-{uuid.uuid4().hex[:8]}"))
    assert created is not None
    return created[0].tenant_id


async def counts(db: Database, tenant_id: uuid.UUID) -> tuple[int, int]:
    async with db.engine.connect() as conn:
        jobs = (await conn.execute(text("SELECT count(*) FROM jobs WHERE tenant_id = :t"), {"t": tenant_id})).scalar()
        due = (
            await conn.execute(text("SELECT count(*) FROM due_index WHERE tenant_id = :t"), {"t": tenant_id})
        ).scalar()
    return jobs, due


async def test_concurrent_submits_share_transactions_and_each_gets_its_own_job(db: Database) -> None:
    tenant_id = await new_tenant(db)
    writer = SubmitWriter(db, WriterConfig(in_flight=1, quota_ttl_s=3600))
    writer.critical = CriticalTenants(refresh_s=3600)  # neither cache expires between the two rounds
    subs = [service.submission(job(f"j{i}"), Settings(), tenant_id, None, None, NOW) for i in range(201)]
    # Cold, the tenant's quotas are read once for every request waiting on them.
    outcomes = await asyncio.gather(*(writer.submit([s]) for s in subs[:100]))
    assert writer.quotas.reads == 1
    # Warm, nothing is awaited before a request joins the queue: the first starts a transaction, the
    # other hundred wait for it and share the next.
    outcomes += await asyncio.gather(*(writer.submit([s]) for s in subs[100:]))
    ids = {o[0].job_id for o in outcomes if isinstance(o[0], Created)}
    assert ids == {s.job.job_id for s in subs}
    assert await counts(db, tenant_id) == (201, 201)
    async with db.engine.connect() as conn:
        xacts = (
            await conn.execute(
                text("SELECT count(DISTINCT xmin::text) FROM jobs WHERE tenant_id = :t AND name IN :late").bindparams(
                    bindparam("late", expanding=True)
                ),
                {"t": tenant_id, "late": [f"j{i}" for i in range(100, 201)]},
            )
        ).scalar()
    assert xacts == 2


async def test_a_request_that_fails_in_a_shared_transaction_fails_alone(db: Database) -> None:
    tenant_id = await new_tenant(db)
    writer = SubmitWriter(db, WriterConfig(in_flight=1))
    first = service.submission(job("first"), Settings(), tenant_id, None, None, NOW)
    good = service.submission(job("good"), Settings(), tenant_id, None, None, NOW)
    # A tenant that does not exist: the foreign key refuses it inside the shared transaction.
    bad = service.submission(job("bad"), Settings(), uuid.uuid4(), None, None, NOW)
    # gather starts them in order: the first takes the one flush slot, the next two wait for it and
    # then share one transaction.
    ran_first, ran_good, ran_bad = await asyncio.gather(
        writer.submit([first]), writer.submit([good]), writer.submit([bad]), return_exceptions=True
    )
    assert isinstance(ran_first, list) and isinstance(ran_first[0], Created)
    assert isinstance(ran_good, list) and isinstance(ran_good[0], Created)
    # The seam translates the database's refusal (23503) into a Kairos error; it reaches only its request.
    assert isinstance(ran_bad, errors.StoreConflict) and ran_bad.sqlstate == "23503"
    assert await counts(db, tenant_id) == (2, 2)


async def test_idempotency_keys_hold_within_and_across_transactions(db: Database) -> None:
    tenant_id, other = await new_tenant(db), await new_tenant(db)
    writer = SubmitWriter(db)

    def keyed(tenant: uuid.UUID, name: str, fingerprint: str) -> object:
        return service.submission(job(name), Settings(), tenant, "key-1", fingerprint, NOW)

    a, same, different, elsewhere = await writer.submit(
        [keyed(tenant_id, "a", "f1"), keyed(tenant_id, "a", "f1"), keyed(tenant_id, "b", "f2"), keyed(other, "a", "f1")]
    )
    assert isinstance(a, Created) and not a.replayed
    assert isinstance(same, Created) and same.replayed and same.job_id == a.job_id
    assert isinstance(different, errors.IdempotencyConflict)
    assert isinstance(elsewhere, Created) and elsewhere.job_id != a.job_id
    [again] = await writer.submit([keyed(tenant_id, "a", "f1")])
    assert isinstance(again, Created) and again.replayed and again.job_id == a.job_id
    assert await counts(db, tenant_id) == (1, 1)


@pytest.mark.parametrize("bad", [{"in_flight": 0}, {"max_rows": 0}])
def test_writer_config_is_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        WriterConfig(**bad)


async def test_a_recurring_job_landing_on_a_crowded_minute_carries_a_herd_warning(db: Database) -> None:
    tenant_id, other = await new_tenant(db), await new_tenant(db)
    writer = SubmitWriter(db, WriterConfig(herd_threshold=3))

    def hourly(name: str, jitter: int | None = None) -> schemas.JobIn:
        return schemas.JobIn(
            name=name,
            target=schemas.TargetIn("queue", "pool"),
            schedule=schemas.ScheduleIn(cron="0 * * * *", tz="UTC", jitter_seconds=jitter),
        )

    first = await writer.submit(
        [service.submission(hourly(f"h{i}"), Settings(), tenant_id, None, None, NOW) for i in range(2)]
    )
    assert all(isinstance(o, Created) and o.warnings == () for o in first)
    [third] = await writer.submit([service.submission(hourly("h2"), Settings(), tenant_id, None, None, NOW)])
    assert isinstance(third, Created) and len(third.warnings) == 1
    assert "3 occurrences" in third.warnings[0] and "jitterSeconds" in third.warnings[0]
    # It says what the tenant's dispatch quota makes of a herd, and how to raise it.
    assert "at most 5,000 a second" in third.warnings[0] and "--max-dispatch-per-s" in third.warnings[0]
    await db.transaction(lambda tx: tx.tenants.set_quota(tenant_id, max_dispatch_per_s=20_000))
    paced = SubmitWriter(db, WriterConfig(herd_threshold=3))
    [fourth] = await paced.submit([service.submission(hourly("h3"), Settings(), tenant_id, None, None, NOW)])
    assert isinstance(fourth, Created) and "at most 20,000 a second" in fourth.warnings[0]
    # Another tenant's herd is not this tenant's; one-offs never warn.
    [theirs] = await writer.submit([service.submission(hourly("x"), Settings(), other, None, None, NOW)])
    assert isinstance(theirs, Created) and theirs.warnings == ()
    [once] = await writer.submit([service.submission(job("once"), Settings(), tenant_id, None, None, NOW)])
    assert isinstance(once, Created) and once.warnings == ()


async def test_a_crowded_minute_is_counted_once_and_again_after_the_memo(db: Database) -> None:
    """A minute found crowded warns without a count for CROWDED_MEMO_S, then is counted afresh."""
    tenant_id = await new_tenant(db)
    now = [0.0]
    writer = SubmitWriter(db, WriterConfig(herd_threshold=3), clock=lambda: now[0])
    hourly = schemas.JobIn(
        name="h", target=schemas.TargetIn("queue", "pool"), schedule=schemas.ScheduleIn(cron="0 * * * *", tz="UTC")
    )

    async def one() -> Created:
        [created] = await writer.submit([service.submission(hourly, Settings(), tenant_id, None, None, NOW)])
        assert isinstance(created, Created)
        return created

    assert [bool((await one()).warnings) for _ in range(3)] == [False, False, True]
    # The minute empties; within the memo the warning stands without a count, after it the count decides.
    async with db.engine.begin() as conn:
        await conn.execute(text("DELETE FROM due_index WHERE tenant_id = :t"), {"t": tenant_id})
    now[0] = CROWDED_MEMO_S - 0.5
    assert (await one()).warnings
    now[0] = 2 * CROWDED_MEMO_S
    assert (await one()).warnings == ()


async def test_concurrent_recurring_submits_into_one_crowded_minute_never_conflict(db: Database) -> None:
    """The herd count reads the minute other submits are writing: outside the write transaction, so
    a tenant's concurrent submits of recurring jobs never make each other re-run (or fail)."""
    tenant_id = await new_tenant(db)
    writer = SubmitWriter(db, WriterConfig(herd_threshold=50, in_flight=4))
    hourly = schemas.JobIn(
        name="h", target=schemas.TargetIn("queue", "pool"), schedule=schemas.ScheduleIn(cron="0 * * * *", tz="UTC")
    )
    got = await asyncio.gather(
        *(writer.submit([service.submission(hourly, Settings(), tenant_id, None, None, NOW)]) for _ in range(300))
    )
    outcomes = [o for [o] in got]
    assert all(isinstance(o, Created) for o in outcomes)
    assert db.retries == 0
    assert await counts(db, tenant_id) == (300, 300)
    # Every job committed after the 50th sees at least 50 due in its minute.
    warned = [o for o in outcomes if isinstance(o, Created) and o.warnings]
    assert len(warned) >= 250 and all("at least 50 occurrences" in o.warnings[0] for o in warned)
