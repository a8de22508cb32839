import asyncio

from sqlalchemy import text

from app.store import migrate, tenants
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
    created = await db.transaction(lambda c: tenants.create(c, "acme"))
    assert created is not None
    tenant, key = created
    principal = await db.transaction(lambda c: tenants.resolve_key(c, key))
    assert principal is not None and principal.tenant_id == tenant.tenant_id
    assert await db.transaction(lambda c: tenants.create(c, "acme")) is None
    new_key, revoked = await db.transaction(lambda c: tenants.rotate_key(c, tenant.tenant_id))
    assert revoked == 1
    assert await db.transaction(lambda c: tenants.resolve_key(c, key)) is None
    assert (await db.transaction(lambda c: tenants.resolve_key(c, new_key))).tenant_id == tenant.tenant_id


async def test_transaction_helper_retries_serialization_failures(db: Database) -> None:
    """Concurrent read-modify-write at SERIALIZABLE: conflicts are retried, no update is lost."""
    created = await db.transaction(lambda c: tenants.create(c, "counter"))
    tenant_id = created[0].tenant_id

    async def bump(conn):
        weight = (await conn.execute(text("SELECT weight FROM tenants WHERE tenant_id = :t"),
                                     {"t": tenant_id})).scalar_one()
        await asyncio.sleep(0.01)  # widen the race window so the transactions overlap
        await conn.execute(text("UPDATE tenants SET weight = :w WHERE tenant_id = :t"),
                           {"w": weight + 1, "t": tenant_id})

    await asyncio.gather(*(db.transaction(bump) for _ in range(8)))
    t = await db.transaction(lambda c: tenants.get(c, tenant_id))
    assert t.weight == 9
    assert db.retries > 0


async def test_skipped_occurrences_are_recorded_once_each(db: Database) -> None:
    import uuid
    from datetime import datetime, timedelta, timezone

    from app.store import jobs

    tenant, _ = await db.transaction(lambda c: tenants.create(c, "skips"))
    job_id = uuid.uuid4()
    at = datetime(2026, 3, 8, 7, tzinfo=timezone.utc)
    times = [at, at + timedelta(days=1)]
    for _ in range(2):  # recording the same occurrences again changes nothing
        await db.transaction(lambda c: jobs.record_skipped(c, job_id, tenant.tenant_id, "q", 3, times, "dst_gap"))
    async with db.engine.connect() as conn:
        got = (await conn.execute(text("SELECT scheduled_for, state, skip_reason FROM executions "
                                       "ORDER BY scheduled_for"))).all()
    assert [tuple(r) for r in got] == [(t, "skipped", "dst_gap") for t in times]
