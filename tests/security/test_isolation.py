"""Tenants only ever see their own data, on every REST route and every worker RPC.

The routes come from the Litestar app's route table and the RPCs from the gRPC service descriptor,
so a route or an RPC added later fails ``test_every_route_and_rpc_is_covered`` until it gets a
probe here (or a reason why it is not tenant data). Each probe is tenant B's key aimed at tenant
A's jobs, executions, dead letters, idempotency keys and figures: B gets 404, an empty page, or its
own figures; no answer to B carries any of A's ids or names; and A's rows are byte for byte the same
afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from app import config
from app.api.app import create_app
from app.executor.batching import Outcomes
from app.rpc import server as rpc_server
from app.rpc.servicer import ServicerConfig
from app.store.db import Database
from kairos_sdk import WorkerClient
from kairos_sdk._proto import worker_pb2
from tests import factories as tf
from tests.api.conftest import ApiProcess, TenantKey, make_tenant, query
from tests.api.test_dead_letters_api import dead_execution

PROBLEM = "application/problem+json"

# Routes that hold no tenant's data, and why.
PUBLIC = {
    ("GET", "/healthz"): "liveness probe",
    ("GET", "/readyz"): "readiness probe",
    ("GET", "/metrics"): "the operator's Prometheus scrape (no tenant key is involved)",
    ("POST", "/demo/echo"): "kairos up --demo's own HTTP target",
    ("GET", "/dashboard"): "the dashboard page: static; its data comes from the /v1 routes covered here",
    ("GET", "/dashboard/assets/{name}"): "the dashboard's static files",
    ("GET", "/schema"): "the OpenAPI page",
    ("GET", "/schema/swagger"): "the OpenAPI page",
    ("GET", "/schema/openapi.json"): "the OpenAPI document",
    ("GET", "/schema/oauth2-redirect.html"): "Swagger UI's static page",
    ("GET", "/schema/{path}"): "the OpenAPI plugin's other renderings",
    ("GET", "/schema/assets/{name}"): "Swagger UI's static files",
    ("GET", "/.well-known/jwks.json"): "the public keys of the identity tokens HTTP targets receive",
    ("GET", "/.well-known/openid-configuration"): "the identity tokens' issuer metadata",
}


@dataclass
class World:
    """Tenant A's data, and everything of it that must never reach tenant B."""

    api: ApiProcess
    a: TenantKey
    b: TenantKey
    job_id: str  # A's cron job
    once_id: str  # A's one-off job, whose execution is dead
    execution_id: str  # the dead execution
    idempotency_key: str
    job_body: dict[str, Any]
    secrets: set[str] = field(default_factory=set)  # strings no answer to B may contain

    def b_client(self) -> httpx.Client:
        return httpx.Client(base_url=self.api.url, headers=self.b.headers, timeout=10)


@pytest.fixture(scope="module")
def world(api: ApiProcess) -> Iterator[World]:
    a, b = make_tenant(api.database_url), make_tenant(api.database_url)
    with httpx.Client(base_url=api.url, headers=a.headers, timeout=10) as client:
        body = {
            "name": "a-secret-report",
            "target": {"type": "queue", "ref": "emails"},
            "payload": {"a": 1},
            "schedule": {"cron": "0 9 * * *", "tz": "UTC"},
            "labels": {"owner": "tenant-a"},
        }
        created = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "shared-key-1"})
        assert created.status_code == 201, created.text
        job_id = created.json()["jobId"]
        once_id, execution_id = dead_execution(api, client, attempts=1)
    yield World(
        api,
        a,
        b,
        job_id,
        once_id,
        execution_id,
        "shared-key-1",
        body,
        {job_id, once_id, execution_id, str(a.tenant_id), a.name, "a-secret-report", "tenant-a"},
    )


def snapshot(w: World) -> list[tuple]:
    """Tenant A's rows in every table that holds them, as text."""
    rows: list[tuple] = []
    for table, order in (
        ("jobs", "job_id"),
        ("due_index", "job_id"),
        ("executions", "execution_id"),
        ("attempts", "execution_id, attempt"),
    ):
        rows += [
            (table, *r)
            for r in query(
                w.api.database_url,
                f"SELECT t::text FROM {table} t WHERE tenant_id = %s ORDER BY {order}",
                (w.a.tenant_id,),
            )
        ]
    return rows


# -- the REST probes: (method, route template) -> what tenant B tries --------------------------------------

Probe = Callable[[World, httpx.Client], None]


def _not_found(resp: httpx.Response) -> None:
    assert resp.status_code == 404, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)


def _own_or_empty(resp: httpx.Response) -> None:
    assert resp.status_code == 200, resp.text


def list_jobs(w: World, c: httpx.Client) -> None:
    for params in (
        {},
        {"name": "a-secret-report"},
        {"namePrefix": "a-"},
        {"label": "owner:tenant-a"},
        {"state": "active"},
    ):
        resp = c.get("/v1/jobs", params=params)
        _own_or_empty(resp)
        assert all(j["jobId"] not in w.secrets for j in resp.json()["jobs"])


def create_job(w: World, c: httpx.Client) -> None:
    # The same Idempotency-Key and body as A's submit: B gets a job of its own, never A's.
    resp = c.post("/v1/jobs", json=w.job_body, headers={"Idempotency-Key": w.idempotency_key})
    assert resp.status_code == 201, resp.text
    assert resp.json()["jobId"] != w.job_id


def create_jobs(w: World, c: httpx.Client) -> None:
    resp = c.post("/v1/jobs:batch", json={"jobs": [{**w.job_body, "idempotencyKey": w.idempotency_key}]})
    assert resp.status_code == 200, resp.text
    [result] = resp.json()["results"]
    assert result.get("jobId") not in (None, w.job_id), result


def get_job(w: World, c: httpx.Client) -> None:
    for job_id in (w.job_id, w.once_id):
        _not_found(c.get(f"/v1/jobs/{job_id}"))


def update_job(w: World, c: httpx.Client) -> None:
    _not_found(c.patch(f"/v1/jobs/{w.job_id}", json={"name": "taken-over"}))
    _not_found(c.patch(f"/v1/jobs/{w.job_id}", json={"name": "taken-over"}, headers={"If-Match": "1"}))


def cancel_job(w: World, c: httpx.Client) -> None:
    _not_found(c.delete(f"/v1/jobs/{w.job_id}"))


def job_action(w: World, c: httpx.Client) -> None:
    past = datetime.now(timezone.utc) - timedelta(days=2)
    bodies = {
        "pause": None,
        "resume": {"missed": "run_once"},
        "run": {"overlap": "allow"},
        "backfill": {"from": past.isoformat(), "to": (past + timedelta(days=1)).isoformat()},
    }
    for verb, body in bodies.items():
        _not_found(c.post(f"/v1/jobs/{w.job_id}:{verb}", json=body))


def job_executions(w: World, c: httpx.Client) -> None:
    for job_id in (w.job_id, w.once_id):
        _not_found(c.get(f"/v1/jobs/{job_id}/executions"))


def preview(w: World, c: httpx.Client) -> None:
    _not_found(c.get("/v1/schedules/preview", params={"jobId": w.job_id}))


def attempts(w: World, c: httpx.Client) -> None:
    _not_found(c.get(f"/v1/executions/{w.execution_id}/attempts"))


def replay(w: World, c: httpx.Client) -> None:
    _not_found(c.post(f"/v1/executions/{w.execution_id}:replay", json={"payload": {"stolen": True}}))


def dead_letters(w: World, c: httpx.Client) -> None:
    for params in ({}, {"jobId": w.once_id}):
        resp = c.get("/v1/dead-letters", params=params)
        _own_or_empty(resp)
        assert resp.json() == []


def replay_many(w: World, c: httpx.Client) -> None:
    for body in ({}, {"jobId": w.once_id}, {"finishedAfter": "2000-01-01T00:00:00Z"}):
        resp = c.post("/v1/dead-letters:replay", json=body)
        assert resp.status_code == 200, resp.text
        assert resp.json()["replayed"] == 0


def stats(path: str) -> Probe:
    def probe(w: World, c: httpx.Client) -> None:
        resp = c.get(path)
        _own_or_empty(resp)
        if "scope" in resp.json():
            assert resp.json()["scope"] == {"viewer": "tenant", "tenant": w.b.name}
        # Naming A's tenant is the operator's privilege.
        chosen = c.get(path, params={"tenant": w.a.name})
        assert chosen.status_code == 403 and chosen.headers["content-type"].startswith(PROBLEM)

    return probe


def stats_tenants(w: World, c: httpx.Client) -> None:
    resp = c.get("/v1/stats/tenants")
    assert resp.status_code in (200, 403), resp.text
    assert resp.status_code == 403 or w.a.name not in resp.text


COVERED: dict[tuple[str, str], Probe] = {
    ("GET", "/v1/jobs"): list_jobs,
    ("POST", "/v1/jobs"): create_job,
    ("POST", "/v1/jobs:batch"): create_jobs,
    ("GET", "/v1/jobs/{job_ref}"): get_job,
    ("PATCH", "/v1/jobs/{job_ref}"): update_job,
    ("DELETE", "/v1/jobs/{job_ref}"): cancel_job,
    ("POST", "/v1/jobs/{job_ref}"): job_action,
    ("GET", "/v1/jobs/{job_ref}/executions"): job_executions,
    ("GET", "/v1/schedules/preview"): preview,
    ("GET", "/v1/executions/{execution_ref}/attempts"): attempts,
    ("POST", "/v1/executions/{execution_ref}"): replay,
    ("GET", "/v1/dead-letters"): dead_letters,
    ("POST", "/v1/dead-letters:replay"): replay_many,
    ("GET", "/v1/stats/lag"): stats("/v1/stats/lag"),
    ("GET", "/v1/stats/outcomes"): stats("/v1/stats/outcomes"),
    ("GET", "/v1/stats/queues"): stats("/v1/stats/queues"),
    ("GET", "/v1/stats/due"): stats("/v1/stats/due"),
    ("GET", "/v1/stats/tenants"): stats_tenants,
    ("GET", "/v1/status"): stats("/v1/status"),
}


def route_table(home: Path) -> set[tuple[str, str]]:
    """Every (method, path template) the app serves, OPTIONS aside (the app answers it for every path)."""
    settings = config.load({"KAIROS_DEMO": "1", "KAIROS_HOME": str(home)})
    app = create_app(settings, None)  # type: ignore[arg-type]  # the routes need no database
    return {
        (method, route.path_format)
        for route in app.routes
        for method in getattr(route, "methods", ())
        if method != "OPTIONS"
    }


# -- the RPC probes: method name -> what tenant B's worker tries on A's leased execution ------------------


@dataclass
class Leased:
    execution_id: str
    attempt: int


RpcProbe = Callable[[WorkerClient, Leased], Any]


async def rpc_lease(b: WorkerClient, held: Leased) -> None:
    assert await b.lease("emails", "b-worker", 10) == []  # A's pool of the same name is not B's


async def rpc_heartbeat(b: WorkerClient, held: Leased) -> None:
    assert (await b.heartbeat(held.execution_id, held.attempt)).lease_lost


async def rpc_complete(b: WorkerClient, held: Leased) -> None:
    assert (await b.complete(held.execution_id, held.attempt, {"stolen": True})).lease_lost


async def rpc_fail(b: WorkerClient, held: Leased) -> None:
    assert (await b.fail(held.execution_id, held.attempt, "stolen", retryable=False)).lease_lost


async def rpc_complete_many(b: WorkerClient, held: Leased) -> None:
    [answer] = await b.complete_many([(held.execution_id, held.attempt, None)])
    assert answer.lease_lost


async def rpc_fail_many(b: WorkerClient, held: Leased) -> None:
    [answer] = await b.fail_many([(held.execution_id, held.attempt, "stolen", False)])
    assert answer.lease_lost


RPCS: dict[str, RpcProbe] = {
    "Lease": rpc_lease,
    "Heartbeat": rpc_heartbeat,
    "Complete": rpc_complete,
    "Fail": rpc_fail,
    "CompleteMany": rpc_complete_many,
    "FailMany": rpc_fail_many,
}


def rpc_table() -> set[str]:
    return {method.name for service in worker_pb2.DESCRIPTOR.services_by_name.values() for method in service.methods}


# -- the tests ---------------------------------------------------------------------------------------------


def test_every_route_and_rpc_is_covered(tmp_path: Path) -> None:
    routes = route_table(tmp_path)
    missing = routes - set(COVERED) - set(PUBLIC)
    assert not missing, f"routes with no isolation probe (add one to COVERED, or a reason to PUBLIC): {missing}"
    stale = (set(COVERED) | set(PUBLIC)) - routes
    assert not stale, f"probes for routes that no longer exist: {stale}"
    assert rpc_table() == set(RPCS), f"RPCs without a probe: {rpc_table() - set(RPCS)}"


@pytest.mark.parametrize("route", sorted(COVERED), ids=lambda r: f"{r[0]} {r[1]}")
def test_tenant_b_never_reads_or_changes_tenant_as_data(world: World, route: tuple[str, str]) -> None:
    before = snapshot(world)
    answers: list[httpx.Response] = []
    with world.b_client() as client:
        client.event_hooks["response"] = [answers.append]
        COVERED[route](world, client)
    for resp in answers:
        resp.read()
        # What B sent (A's ids in the path or body, echoed as a problem's instance) is not a leak.
        sent = str(resp.request.url) + resp.request.content.decode(errors="replace")
        leaked = [s for s in world.secrets if s in resp.text and s not in sent]
        assert not leaked, f"{resp.request.method} {resp.request.url} showed tenant A's {leaked}: {resp.text[:300]}"
    assert snapshot(world) == before, f"{route} changed tenant A's rows"
    # A still sees all of it.
    with httpx.Client(base_url=world.api.url, headers=world.a.headers, timeout=10) as a:
        assert a.get(f"/v1/jobs/{world.job_id}").json()["name"] == "a-secret-report"
        assert [d["executionId"] for d in a.get("/v1/dead-letters").json()] == [world.execution_id]


@pytest.mark.parametrize("method", sorted(RPCS))
async def test_tenant_b_never_leases_or_settles_tenant_as_executions(
    db: Database, database_url: str, method: str
) -> None:
    a, b = await tf.tenant(db), await tf.tenant(db)
    job = await tf.job(db, a.tenant_id, queue=tf.tenant_queue(a.tenant_id, "emails"))
    [held_id, waiting_id] = await tf.ready_executions(db, job, count=2)
    server, servicer, port = await rpc_server.start(
        db, Outcomes(db), "127.0.0.1", 0, ServicerConfig(poll_interval_s=0.05)
    )
    addr = f"127.0.0.1:{port}"

    async def state() -> list[tuple]:
        return [
            *query(
                database_url,
                "SELECT e::text FROM executions e WHERE tenant_id = %s ORDER BY execution_id",
                (a.tenant_id,),
            ),
            *query(
                database_url,
                "SELECT t::text FROM attempts t WHERE tenant_id = %s ORDER BY execution_id, attempt",
                (a.tenant_id,),
            ),
        ]

    try:
        async with WorkerClient(addr, a.key) as worker_a, WorkerClient(addr, b.key) as worker_b:
            [leased] = await worker_a.lease("emails", "a-worker", 1)
            held = Leased(leased.execution_id, leased.attempt)
            assert held.execution_id in (str(held_id), str(waiting_id))
            before = await state()
            await RPCS[method](worker_b, held)
            assert await state() == before, f"{method} from tenant B changed tenant A's executions"
            # A's worker still holds its lease and settles it; the other execution is still there for A.
            assert (await worker_a.complete(held.execution_id, held.attempt, {"ok": True})).outcome == "ok"
            [other] = await worker_a.lease("emails", "a-worker", 1)
            assert other.execution_id != held.execution_id
    finally:
        await rpc_server.stop(server, servicer, 0.5)
