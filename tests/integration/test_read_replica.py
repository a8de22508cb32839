"""KAIROS_READ_DATABASE_URL: history, attempts, dead letters and stats read from a real streaming
standby (PostgreSQL 15, app/drill/cluster.py), never written through it; a read that a lagging
standby cannot answer yet is answered by the primary."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from sqlalchemy import text

from app import errors
from app.api.dead_letters import service as dead_letter_service
from app.api.jobs import service
from app.api.stats import service as stats_service
from app.api.viewer import Viewer
from app.config import Settings
from app.drill.cluster import Cluster, Node, start_pair
from app.drill.reads import replication
from app.store import Database, Store, migrate
from app.store.db import create_engine
from app.store.executions import Failure
from tests import factories

pytestmark = pytest.mark.slow


@dataclass
class Pair:
    cluster: Cluster
    primary: Node
    standby: Node
    db: Database  # the primary, with the standby as its read database


@pytest.fixture(scope="module")
async def pair() -> AsyncIterator[Pair]:
    cluster, primary, standby = await start_pair(synchronous=False)
    try:
        bootstrap = Database(create_engine(primary.url(), pool_size=1))
        await migrate.upgrade(bootstrap)
        await bootstrap.close()
        settings = Settings(database_url=primary.url(), read_database_url=standby.url(), db_pool_size=2)
        db = Database.from_settings(settings, primary.url(), name="test")
        yield Pair(cluster, primary, standby, db)
        await db.close()
    finally:
        cluster.close()


async def caught_up(p: Pair) -> None:
    """Wait until the standby has replayed everything the primary wrote so far."""
    await p.cluster.wait_streaming(p.primary, "standby", sync=False)
    for _ in range(400):
        state = await p.primary.standby("standby")
        if state is not None and state.replay_lag_bytes == 0:
            return
        await _sleep()
    raise AssertionError("the standby did not catch up")


async def _sleep() -> None:
    import asyncio

    await asyncio.sleep(0.025)


async def dead_job(db: Database) -> tuple[factories.TenantFixture, uuid.UUID, uuid.UUID]:
    t = await factories.tenant(db)
    queue = factories.tenant_queue(t.tenant_id, "work")
    job_id = await factories.job(db, t.tenant_id, queue=queue, max_attempts=1)
    [execution_id] = await factories.ready_executions(db, job_id)

    async def lease_and_fail(tx: Store) -> None:
        [leased] = await tx.executions.lease(queue, "w1", 1, 30.0)
        await tx.executions.fail_many([Failure(leased.execution_id, leased.attempt, "boom", retryable=False)])

    await db.transaction(lease_and_fail)
    return t, job_id, execution_id


async def test_history_attempts_dead_letters_and_stats_are_read_from_the_standby(pair: Pair) -> None:
    db = pair.db
    t, job_id, execution_id = await dead_job(db)
    await caught_up(pair)

    async def where(tx: Store) -> bool:
        return await replication(tx).in_recovery()

    assert await db.read(where) is True  # the standby answers reads
    assert await db.transaction(where) is False  # and only reads

    job, rows, attempts, _ = await service.executions(db, t.tenant_id, job_id, None, None)
    assert job.job_id == job_id and [r.execution_id for r in rows] == [execution_id]
    assert [a.outcome for a in attempts[execution_id]] == ["failed"]
    dead, _ = await dead_letter_service.list_dead(db, t.tenant_id, job_id=None, cursor=None, limit=None)
    assert [d.execution_id for d in dead] == [execution_id]
    assert [a.attempt for a in await dead_letter_service.attempts(db, t.tenant_id, execution_id)] == [1]
    queues = await stats_service.queues(db, Viewer(tenant_id=t.tenant_id, tenant_name=t.name, admin=False))
    assert queues.dead_letters.count == 1


async def test_the_read_database_refuses_writes(pair: Pair) -> None:
    db = pair.db
    t = await factories.tenant(db)
    await caught_up(pair)
    with pytest.raises(errors.StoreFailure) as refused:
        await db.read(lambda tx: tx.tenants.set_quota(t.tenant_id, weight=9))
    assert refused.value.sqlstate == "25006"  # read_only_sql_transaction: refused before the standby would
    tenant = await db.transaction(lambda tx: tx.tenants.get(t.tenant_id))
    assert tenant is not None and tenant.weight == 1


async def test_a_job_the_lagging_standby_has_not_replayed_is_answered_by_the_primary(pair: Pair) -> None:
    db = pair.db
    standby = Database(create_engine(pair.standby.url(), isolation="READ COMMITTED", pool_size=1))

    async def replay(conn: Any, *, pause: bool) -> None:
        await conn.execute(text("SELECT pg_wal_replay_pause()" if pause else "SELECT pg_wal_replay_resume()"))

    t = await factories.tenant(db)
    await caught_up(pair)
    await factories.raw(standby, lambda conn: replay(conn, pause=True))
    try:
        job_id = await factories.job(db, t.tenant_id, queue=factories.tenant_queue(t.tenant_id, "work"))
        with pytest.raises(errors.JobNotFound):  # the standby alone has not seen it
            await db.read(lambda tx: _job_or_missing(tx, t.tenant_id, job_id))
        job, rows, _, _ = await service.executions(db, t.tenant_id, job_id, None, None)
        assert job.job_id == job_id and rows == []
    finally:
        await factories.raw(standby, lambda conn: replay(conn, pause=False))
        await standby.close()


async def _job_or_missing(tx: Store, tenant_id: uuid.UUID, job_id: uuid.UUID) -> Any:
    job = await tx.jobs.get(tenant_id, job_id)
    if job is None:
        raise errors.JobNotFound()
    return job
