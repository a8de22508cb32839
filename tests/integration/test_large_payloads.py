"""Payloads over the inline limit go to the object store; the job row holds the reference (docs/retention.md).

Real `kairos api`, `kairos scheduler` and `kairos executor` processes on one database and one
KAIROS_HOME (whose objects/ directory is the object store); the tenant's SDK worker runs in this
process, the HTTP target is a local endpoint.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import string
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import pytest
from sqlalchemy import text

from app.executor.batching import Outcomes
from app.executor.payloads import encode_payload, resolve_leased
from app.store.db import Database
from app.store.objects import LocalObjectStore
from app.store.payloads import PayloadStore
from kairos_sdk import Worker
from kairos_sdk.signature import verify
from tests import factories
from tests.api.conftest import TenantKey, make_tenant, query
from tests.conftest import free_port
from tests.e2e.conftest import endpoint
from tests.support.polling import poll, wait_for

MAX_BYTES = 2 * 1024 * 1024  # KAIROS_PAYLOAD_MAX_BYTES of these processes


@dataclass(frozen=True)
class Tiers:
    api: str
    grpc_addr: str
    home: Path
    database_url: str


@pytest.fixture(scope="module")
def tiers(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tiers]:
    home = tmp_path_factory.mktemp("home")
    logs = tmp_path_factory.mktemp("logs")
    api_port, grpc_port = free_port(), free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")},
        "KAIROS_DATABASE_URL": module_database_url,
        "KAIROS_HOME": str(home),
        "KAIROS_API_PORT": str(api_port),
        "KAIROS_API_WORKERS": "1",
        "KAIROS_GRPC_PORT": str(grpc_port),
        "KAIROS_METRICS_PORT": "0",
        "KAIROS_HTTP_EGRESS_ALLOW": "127.0.0.1",
        "KAIROS_PAYLOAD_MAX_BYTES": str(MAX_BYTES),
        "KAIROS_LOG_FORMAT": "json",
        "KAIROS_SECRET_KEY": os.environ["KAIROS_SECRET_KEY"],
    }
    procs = {}
    for tier in ("api", "scheduler", "executor"):
        with open(logs / f"{tier}.log", "wb") as out:
            procs[tier] = subprocess.Popen(
                [sys.executable, "-m", "app.cli", tier], env=env, stdout=out, stderr=subprocess.STDOUT
            )
    api = f"http://127.0.0.1:{api_port}"

    def ready() -> bool:
        for tier, proc in procs.items():
            if proc.poll() is not None:
                raise AssertionError(f"kairos {tier} exited: {(logs / f'{tier}.log').read_text()[-2000:]}")
        try:
            return httpx.get(f"{api}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(ready, timeout_s=60, what="kairos api /readyz")
    try:
        yield Tiers(api, f"127.0.0.1:{grpc_port}", home, module_database_url)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            proc.wait(timeout=30)


def big_payload(size: int) -> dict[str, Any]:
    rng = random.Random(size)
    blob = "".join(rng.choices(string.ascii_letters + string.digits, k=size))
    return {"blob": blob, "nested": {"é": [1, 2.5, None, True], "quote": '"\\\n'}, "n": size}


def submit(tiers: Tiers, tenant: TenantKey, target: dict[str, Any], payload: Any, delay_s: int = 1) -> httpx.Response:
    body = {"name": "big", "target": target, "payload": payload, "schedule": {"delaySeconds": delay_s}}
    return httpx.post(f"{tiers.api}/v1/jobs", json=body, headers=tenant.headers, timeout=30)


@pytest.mark.slow
def test_a_1_mib_payload_reaches_an_sdk_worker_and_an_http_target_whole(tiers: Tiers) -> None:
    tenant = make_tenant(tiers.database_url)
    payload = big_payload(1024 * 1024)
    received_by_worker: list[Any] = []

    with endpoint() as (url, requests):
        queued = submit(tiers, tenant, {"type": "queue", "ref": "big"}, payload)
        assert queued.status_code == 201, queued.text
        posted = submit(tiers, tenant, {"type": "http", "ref": f"{url}/hook"}, payload)
        assert posted.status_code == 201, posted.text
        small = submit(tiers, tenant, {"type": "queue", "ref": "small"}, {"x": 1})
        assert small.status_code == 201, small.text

        # The rows hold references, not the payload; the object is in the store, named by its content.
        for created in (queued, posted):
            [(inline, ref)] = query(
                tiers.database_url,
                "SELECT payload, payload_ref FROM jobs WHERE job_id = %s",
                (created.json()["jobId"],),
            )
            assert inline is None and ref.startswith(f"payloads/{tenant.tenant_id}/") and ref.endswith(".json")
            assert json.loads((tiers.home / "objects" / ref).read_bytes()) == payload
        assert query(
            tiers.database_url, "SELECT payload, payload_ref FROM jobs WHERE job_id = %s", (small.json()["jobId"],)
        ) == [({"x": 1}, None)]

        # The API answers the whole payload for the job.
        job = httpx.get(f"{tiers.api}/v1/jobs/{queued.json()['jobId']}", headers=tenant.headers, timeout=30).json()
        assert job["payload"] == payload and job["payloadRef"].startswith("payloads/")

        async def got() -> bool:
            return bool(received_by_worker)

        async def work() -> None:
            worker = Worker(
                "big",
                lambda e: received_by_worker.append(e.payload),
                addr=tiers.grpc_addr,
                api_key=tenant.key,
                wait_seconds=0.5,
            )
            stop = asyncio.Event()
            running = asyncio.create_task(worker.run(stop))
            try:
                await poll(got, timeout_s=30, what="the SDK worker's execution")
            finally:
                stop.set()
                await running

        asyncio.run(work())
        assert received_by_worker == [payload]

        wait_for(lambda: requests, timeout_s=30, what="the HTTP delivery")
        delivered = requests[0]
        assert json.loads(delivered.body) == payload
        assert verify(tenant.signing_secret, delivered.headers["kairos-signature"], delivered.body)

    def succeeded() -> bool:
        return (
            query(
                tiers.database_url,
                "SELECT count(*) FROM executions WHERE tenant_id = %s AND state = 'succeeded'",
                (tenant.tenant_id,),
            )[0][0]
            == 2
        )

    wait_for(succeeded, timeout_s=30, what="both executions succeeded")


@pytest.mark.slow
def test_a_payload_over_the_maximum_is_refused_and_nothing_is_stored(tiers: Tiers) -> None:
    tenant = make_tenant(tiers.database_url)
    over = submit(tiers, tenant, {"type": "queue", "ref": "big"}, big_payload(MAX_BYTES + 1))
    assert over.status_code == 422, over.text
    assert over.headers["content-type"].startswith("application/problem+json")
    assert over.json()["field"] == "/payload" and str(MAX_BYTES) in over.json()["detail"]

    body_too_large = submit(tiers, tenant, {"type": "queue", "ref": "big"}, big_payload(MAX_BYTES + 128 * 1024))
    assert body_too_large.status_code == 413
    assert body_too_large.json()["maxBytes"] == MAX_BYTES + 64 * 1024
    assert query(tiers.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,)) == [(0,)]
    assert not (tiers.home / "objects" / "payloads" / str(tenant.tenant_id)).exists()


@pytest.mark.slow
def test_patching_a_job_keeps_or_replaces_its_large_payload(tiers: Tiers) -> None:
    tenant = make_tenant(tiers.database_url)
    payload = big_payload(200 * 1024)
    created = submit(tiers, tenant, {"type": "queue", "ref": "big"}, payload, delay_s=3600)  # stays active
    job_id = created.json()["jobId"]
    url = f"{tiers.api}/v1/jobs/{job_id}"

    renamed = httpx.patch(url, json={"name": "renamed"}, headers=tenant.headers, timeout=30)
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["payload"] == payload  # untouched, still by reference

    merged = httpx.patch(url, json={"payload": {"n": 7}}, headers=tenant.headers, timeout=30)
    assert merged.status_code == 200, merged.text
    assert merged.json()["payload"] == {**payload, "n": 7}  # a merge patch into the whole payload

    shrunk = httpx.patch(url, json={"payload": {"blob": None, "nested": None}}, headers=tenant.headers, timeout=30)
    assert shrunk.json()["payload"] == {"n": 7} and shrunk.json()["payloadRef"] is None
    assert query(tiers.database_url, "SELECT payload, payload_ref FROM jobs WHERE job_id = %s", (job_id,)) == [
        ({"n": 7}, None)
    ]


async def test_a_lease_reads_only_referenced_payloads_fails_a_lost_one_and_bounds_its_answer(
    db: Database, tmp_path: Path
) -> None:
    t = await factories.tenant(db)
    queue = factories.tenant_queue(t.tenant_id, "big")
    payloads = PayloadStore(CountingStore(tmp_path / "objects"), inline_bytes=1024)
    inline_job = await factories.job(db, t.tenant_id, queue=queue, payload={"small": True})
    refs = [await payloads.keep(t.tenant_id, big_payload(4096 + i)) for i in range(3)]
    jobs = [await factories.job(db, t.tenant_id, queue=queue) for _ in refs]
    lost = await factories.job(db, t.tenant_id, queue=queue)

    async def by_reference(conn: Any) -> None:
        for job_id, ref in [*zip(jobs, refs, strict=True), (lost, f"payloads/{t.tenant_id}/{'0' * 64}.json")]:
            await conn.execute(
                text("UPDATE jobs SET payload = NULL, payload_ref = :ref WHERE job_id = :j"), {"ref": ref, "j": job_id}
            )

    await factories.raw(db, by_reference)
    for job_id in (lost, inline_job, *jobs):  # leased in this order (one tenant: by ready_at)
        await factories.ready_executions(db, job_id)
    payloads.objects.gets = 0  # type: ignore[attr-defined]
    payloads._cache.clear()

    leased = await db.transaction(lambda tx: tx.executions.lease(queue, "w", 10, 30))
    assert len(leased) == 5
    assert [e.payload_ref is None for e in leased].count(True) == 1  # the inline one carries no reference
    got = await resolve_leased(payloads, leased, Outcomes(db), budget_bytes=5000)

    by_job = {UUID(e.job_id): e for e in got}  # leased ids are text
    assert by_job[inline_job].payload == {"small": True}
    whole = [e for e in got if UUID(e.job_id) in jobs]
    assert [UUID(e.job_id) for e in whole] == jobs[:2]  # the third did not fit in the answer's budget (4 KB each)
    # Handed on as the bytes in the store (compact JSON, read once, never decoded), the inline one encoded.
    stored = [(tmp_path / "objects" / ref).read_bytes() for ref in refs]
    assert [encode_payload(e.payload) for e in whole] == stored[:2]
    assert all(json.loads(stored[i]) == big_payload(4096 + i) for i in range(2))
    assert encode_payload(by_job[inline_job].payload) == b'{"small":true}'
    assert payloads.objects.gets == 3  # type: ignore[attr-defined]  # the lost one and two; nothing inline
    states = {r.job_id: r for r in await factories.raw(db, lambda c: _executions(c, t.tenant_id))}
    assert (states[lost].state, states[lost].attempt) == ("ready", 1)
    assert states[lost].error.startswith("payload unavailable: no object")
    assert states[jobs[2]].state == "ready" and states[jobs[2]].error is None  # handed back unspent


async def _executions(conn: Any, tenant_id: Any) -> list[Any]:
    return list(
        await conn.execute(
            text("SELECT job_id, state, attempt, error FROM executions WHERE tenant_id = :t"), {"t": tenant_id}
        )
    )


class CountingStore(LocalObjectStore):
    gets = 0

    async def get(self, key: str) -> bytes:
        self.gets += 1
        return await super().get(key)
