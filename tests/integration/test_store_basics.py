import asyncio

import pytest
from sqlalchemy import text

from app.store import Store, migrate
from app.store.db import Database, create_engine


async def test_migrations_are_recorded_and_idempotent(db: Database) -> None:
    assert await migrate.pending(db) == []
    assert await migrate.upgrade(db) == []
    applied = await migrate.applied(db)
    assert set(applied) == {m.version for m in migrate.available()}


async def test_concurrent_upgrades_on_an_empty_database_apply_each_migration_once(pg_base_url: str) -> None:
    import uuid

    import psycopg

    from app.store import embedded

    name = f"m_{uuid.uuid4().hex[:12]}"
    admin = pg_base_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = embedded.to_sqlalchemy_url(admin, name)
    dbs = [Database(create_engine(url, pool_size=2)) for _ in range(5)]
    try:
        results = await asyncio.gather(*(migrate.upgrade(d) for d in dbs))
        flat = [v for r in results for v in r]
        assert sorted(flat) == sorted(m.version for m in migrate.available())
        async with dbs[0].engine.connect() as conn:
            count = (await conn.execute(text("SELECT count(*) FROM shard_leases"))).scalar_one()
        assert count == 256
    finally:
        for d in dbs:
            await d.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_tenant_keys_resolve_rotate_and_revoke(db: Database) -> None:
    created = await db.transaction(lambda c: c.tenants.create("acme"))
    assert created is not None
    tenant, key = created
    principal = await db.transaction(lambda c: c.tenants.resolve_key(key))
    assert principal is not None and principal.tenant_id == tenant.tenant_id
    assert await db.transaction(lambda c: c.tenants.create("acme")) is None
    new_key, revoked = await db.transaction(lambda c: c.tenants.rotate_key(tenant.tenant_id))
    assert revoked == 1
    assert await db.transaction(lambda c: c.tenants.resolve_key(key)) is None
    assert (await db.transaction(lambda c: c.tenants.resolve_key(new_key))).tenant_id == tenant.tenant_id


async def test_transaction_helper_retries_serialization_failures(db: Database) -> None:
    """Concurrent read-modify-write at SERIALIZABLE: conflicts are retried, no update is lost."""
    created = await db.transaction(lambda c: c.tenants.create("counter"))
    tenant_id = created[0].tenant_id

    async def bump(tx: Store) -> None:
        tenant = await tx.tenants.get(tenant_id)
        await asyncio.sleep(0.01)  # widen the race window so the transactions overlap
        await tx.tenants.set_quota(tenant_id, weight=tenant.weight + 1)

    await asyncio.gather(*(db.transaction(bump) for _ in range(8)))
    t = await db.transaction(lambda c: c.tenants.get(tenant_id))
    assert t.weight == 9
    assert db.retries > 0


async def test_skipped_occurrences_are_recorded_once_each(db: Database) -> None:
    import uuid
    from datetime import datetime, timedelta, timezone

    tenant, _ = await db.transaction(lambda c: c.tenants.create("skips"))
    job_id = uuid.uuid4()
    at = datetime(2026, 3, 8, 7, tzinfo=timezone.utc)
    times = [at, at + timedelta(days=1)]
    for _ in range(2):  # recording the same occurrences again changes nothing
        await db.transaction(lambda c: c.jobs.record_skipped(job_id, tenant.tenant_id, "q", 3, times, "dst_gap"))
    async with db.engine.connect() as conn:
        got = (
            await conn.execute(text("SELECT scheduled_for, state, skip_reason FROM executions ORDER BY scheduled_for"))
        ).all()
    assert [tuple(r) for r in got] == [(t, "skipped", "dst_gap") for t in times]


async def test_database_errors_leave_the_seam_as_kairos_errors(db: Database) -> None:
    """No SQLAlchemy or psycopg exception crosses Database.transaction: each class has its own error."""
    from app import errors

    created = await db.transaction(lambda tx: tx.tenants.create("seam-errors"))
    tenant_id = created[0].tenant_id
    # 23503: a grant for a pool that does not exist.
    with pytest.raises(errors.StoreConflict) as conflict:
        await db.transaction(lambda tx: tx.pools.grant("no-such-pool", tenant_id))
    assert conflict.value.sqlstate == "23503"
    # 22xxx: a weight the integer column cannot hold.
    with pytest.raises(errors.StoreRejected) as rejected:
        await db.transaction(lambda tx: tx.tenants.set_quota(tenant_id, weight=2**40))
    assert rejected.value.sqlstate is not None and rejected.value.sqlstate.startswith("22")
    # Anything else (here an undefined table, 42P01) is a StoreFailure naming the SQLSTATE.
    with pytest.raises(errors.StoreFailure, match="42P01"):
        await db.transaction(_undefined_table)
    # Nothing of the failed transactions stuck.
    assert (await db.transaction(lambda tx: tx.tenants.get(tenant_id))).weight == created[0].weight


async def _undefined_table(tx: Store) -> None:
    await tx.schema.run_script("SELECT * FROM no_such_table")
