"""Shared pools and a tenant's own pools are separate namespaces: ``emails`` is always the
tenant's own pool, ``shared/emails`` the operator's shared pool, whichever exist.

Found in review: once an operator created shared pool ``emails`` and granted it to a tenant,
that tenant's new jobs for its own pool ``emails`` went to the shared queue, which its workers
(serving its own ``emails``) never saw; a tenant not granted it got 403 for its own pool.
Through the real REST app and the real gRPC server (in-process), on the test's database.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta, timezone

import grpc
import pytest
from litestar.testing import AsyncTestClient

from app.api.app import create_app
from app.config import Settings
from app.executor import pools as pool_service
from app.store import migrate
from app.store.db import Database, create_engine
from kairos_sdk import WorkerClient
from tests import factories as tf
from tests.conftest import fresh_database
from tests.rpc.conftest import addr  # noqa: F401  (fixture)


@pytest.fixture
async def rest(db: Database) -> AsyncIterator[AsyncTestClient]:
    async with AsyncTestClient(app=create_app(Settings(), db)) as client:
        yield client


def queue_job(ref: str) -> dict:
    at = (datetime.now(timezone.utc) - timedelta(seconds=1)).isoformat().replace("+00:00", "Z")
    return {
        "name": f"to-{ref}",
        "target": {"type": "queue", "ref": ref},
        "payload": {"ref": ref},
        "schedule": {"runAt": at},
    }


def auth(t: tf.TenantFixture) -> dict[str, str]:
    return {"Authorization": f"Bearer {t.key}"}


async def submit(rest: AsyncTestClient, t: tf.TenantFixture, ref: str) -> str:
    resp = await rest.post("/v1/jobs", json=queue_job(ref), headers=auth(t))
    assert resp.status_code == 201, resp.text
    return resp.json()["jobId"]


async def dispatch_now(db: Database, job_id: str) -> None:
    """The job's one occurrence as the scheduler's dispatch leaves it: a ready execution."""
    await tf.ready_executions(db, job_id)


async def test_a_shared_pool_never_captures_a_tenants_own_pool_of_the_same_name(
    db: Database, rest: AsyncTestClient, addr: str
) -> None:
    acme, beta = await tf.tenant(db), await tf.tenant(db)
    created = await pool_service.create(db, "emails", (acme.name,))
    assert created.name == "emails"

    own = await submit(rest, acme, "emails")
    shared = await submit(rest, acme, "shared/emails")
    # A tenant not granted the shared pool still has its own `emails`.
    beta_own = await submit(rest, beta, "emails")
    for job_id in (own, shared, beta_own):
        await dispatch_now(db, job_id)

    got = (await rest.get(f"/v1/jobs/{shared}", headers=auth(acme))).json()
    assert (got["target"]["type"], got["target"]["ref"]) == ("queue", "shared/emails")

    async with (
        WorkerClient(addr, acme.key) as acme_worker,
        WorkerClient(addr, beta.key) as beta_worker,
        WorkerClient(addr, created.worker_key) as fleet,
    ):
        [mine] = await acme_worker.lease("emails", "acme-w", 10)
        assert mine.job_id == own
        [theirs] = await beta_worker.lease("emails", "beta-w", 10)
        assert theirs.job_id == beta_own
        [pooled] = await fleet.lease("shared/emails", "fleet-w", 10)
        assert pooled.job_id == shared
        # A tenant key serves its own pools only; asking for the shared one is refused, not empty.
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await acme_worker.lease("shared/emails", "acme-w", 1)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "shared/emails" in err.value.details()


async def test_only_granted_tenants_target_a_shared_pool_and_a_missing_one_is_refused(
    db: Database, rest: AsyncTestClient
) -> None:
    acme, beta = await tf.tenant(db), await tf.tenant(db)
    await pool_service.create(db, "emails", (acme.name,))
    for t, ref in ((beta, "shared/emails"), (acme, "shared/nope")):
        resp = await rest.post("/v1/jobs", json=queue_job(ref), headers=auth(t))
        assert resp.status_code == 403, resp.text
        assert ref in resp.json()["detail"]
    resp = await rest.post("/v1/jobs", json=queue_job("shared/"), headers=auth(acme))
    assert resp.status_code == 422
    assert resp.json()["field"] == "/target/ref"
    # Nothing was written by the refusals.
    listed = (await rest.get("/v1/jobs", headers=auth(beta))).json()
    assert listed["jobs"] == []


async def test_pool_key_leases_its_pool_by_the_shared_name(db: Database, addr: str) -> None:
    a = await tf.tenant(db)
    created = await pool_service.create(db, "fleet", (a.name,))
    job = await tf.job(db, a.tenant_id, queue=tf.shared_queue("fleet"), target_ref="shared/fleet")
    [eid] = await tf.ready_executions(db, job)
    async with WorkerClient(addr, created.worker_key) as fleet:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await fleet.lease("shared/other", "w", 1)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        [held] = await fleet.lease("shared/fleet", "w", 1)
        assert held.execution_id == str(eid)


async def tenant_as_of_0009(db: Database) -> tf.TenantFixture:
    """A tenant row written with the columns the schema had then (the shipped insert names later ones)."""
    import uuid

    from sqlalchemy import text

    tenant_id, name = uuid.uuid4(), f"t-{uuid.uuid4().hex[:8]}"

    async def insert(conn) -> None:
        await conn.execute(
            text("INSERT INTO tenants (tenant_id, name, signing_secret) VALUES (:t, :n, 'plain')"),
            {"t": tenant_id, "n": name},
        )

    await tf.raw(db, insert)
    return tf.TenantFixture(tenant_id, name, "", "plain")


async def upgrade_before(db: Database, version: str) -> None:
    """Apply the migrations older than ``version``, as a database from before it would have them."""
    await db.transaction(lambda s: s.schema.create_ledger())
    for m in migrate.available():
        if m.version < version:

            async def apply(s, m=m) -> None:
                assert await s.schema.claim(m.version, m.checksum)
                await s.schema.run_script(m.script)

            await db.transaction(apply)


async def test_migration_0010_names_existing_shared_targets_explicitly(pg_base_url: str) -> None:
    """Jobs stored before 0010 keep their queue; a job in a shared queue gets the `shared/` ref."""
    with fresh_database(pg_base_url, "template0") as url:
        db = Database(create_engine(url, pool_size=2))
        try:
            await upgrade_before(db, "0010")
            t = await tenant_as_of_0009(db)
            shared = await tf.job(db, t.tenant_id, queue=tf.shared_queue("emails"), target_ref="emails")
            own = await tf.job(db, t.tenant_id, queue=tf.tenant_queue(t.tenant_id, "emails"), target_ref="emails")
            http = await tf.job(db, t.tenant_id, queue=tf.HTTP_QUEUE, target_ref="https://example.com/shared:x")
            assert "0010_pool_namespaces" in await migrate.upgrade(db)
            refs = {
                j: (await db.transaction(lambda tx, j=j: tx.jobs.get(t.tenant_id, j))).target_ref
                for j in (shared, own, http)
            }
            assert refs == {shared: "shared/emails", own: "emails", http: "https://example.com/shared:x"}
        finally:
            await db.close()
