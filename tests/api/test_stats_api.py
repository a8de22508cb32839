"""/v1/stats/*, /v1/status, /dashboard and /schema over real HTTP against a `kairos api` process.

Two tenants get known figures, written through the store's own statements (lease and outcome
calls given the instant they happen at): tenant A has three occurrences in one minute started
100 ms, 200 ms and 5 s late (one succeeded, one retried, one dead), B one started 60 s late and
dead. A never sees B's numbers, the admin token sees both, and ?tenant= narrows it to one.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from app.store import executions as ex
from app.store.db import Database, create_engine
from tests import factories as tf
from tests.api.conftest import ApiProcess, TenantKey, make_tenant

PROBLEM = "application/problem+json"
ADMIN_TOKEN = "admin-" + uuid.uuid4().hex


@pytest.fixture(scope="module", autouse=True)
def admin_token_env() -> Iterator[None]:
    """The module's `kairos api` (the conftest's `api`, started after this) reads KAIROS_ADMIN_TOKEN."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAIROS_ADMIN_TOKEN", ADMIN_TOKEN)
        yield


@dataclass(frozen=True)
class Seeded:
    a: TenantKey
    b: TenantKey
    minute: datetime  # the minute A's three occurrences are due in
    herd_minute: datetime  # the minute A's 5 and B's 2 due_index rows fall in


def _minute(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


async def _seed(database_url: str, a: TenantKey, b: TenantKey) -> Seeded:
    db = Database(create_engine(database_url, pool_size=2))
    try:
        now = datetime.now(timezone.utc)
        minute = _minute(now) - timedelta(minutes=1)
        qa, qb = tf.tenant_queue(a.tenant_id, "reports"), tf.tenant_queue(b.tenant_id, "billing")
        job_a = await tf.job(db, a.tenant_id, queue=qa, max_attempts=3, name="report")
        due = [minute + timedelta(seconds=s) for s in (5, 15, 25)]
        inserted = await tf.insert_ready(db, [job_a] * 3, due)
        held = []
        for at, lag_s in zip(due, (0.1, 0.2, 5.0), strict=True):  # one ready at a time: leased in due order
            [lease] = await db.transaction(
                lambda tx, t=at + timedelta(seconds=lag_s): tx.executions.lease(qa, "worker-a", 1, 30, now=t)
            )
            held.append(lease)
        assert [h.scheduled_for for h in held] == due and {h.execution_id for h in held} == {str(i) for i in inserted}
        ids = [h.execution_id for h in held]
        # A: one more leased now (the only ready one), one dispatched ahead (ready in 30 minutes).
        [running] = await tf.insert_ready(db, [job_a], [now])  # in this minute, never in `minute`
        await db.transaction(lambda tx: tx.executions.lease(qa, "worker-a", 5, 30))
        await db.transaction(lambda tx: tx.executions.complete_many([ex.Success(ids[0], held[0].attempt)]))
        # The retry's backoff runs from an instant long past: it is ready (due) again already.
        await db.transaction(
            lambda tx: tx.executions.fail_many(
                [
                    ex.Failure(ids[1], held[1].attempt, "timeout talking to the mail server"),
                    ex.Failure(ids[2], held[2].attempt, "bad recipient", retryable=False),
                ],
                now=due[2] + timedelta(seconds=6),
            )
        )
        await tf.insert_ready(db, [job_a], [now + timedelta(minutes=30)])
        # B: one occurrence started a minute late, then dead.
        job_b = await tf.job(db, b.tenant_id, queue=qb, max_attempts=1, name="invoice")
        [late] = await tf.insert_ready(db, [job_b], [minute + timedelta(seconds=1)])
        [lb] = await db.transaction(
            lambda tx: tx.executions.lease(qb, "worker-b", 1, 30, now=minute + timedelta(seconds=61))
        )
        await db.transaction(lambda tx: tx.executions.fail_many([ex.Failure(late, lb.attempt, "no such customer")]))
        # due_index: A's herd of 5 and B's 2 in the same minute two hours ahead.
        herd = _minute(now) + timedelta(hours=2)
        for tenant, queue, n in ((a, qa, 5), (b, qb, 2)):
            for _ in range(n):
                job = await tf.job(db, tenant.tenant_id, queue=queue, name="hourly")
                await db.transaction(lambda tx, j=job, t=tenant: tx.jobs.insert_due(j, t.tenant_id, herd, herd))
        # Two schedulers hold 100 and 50 shards.
        await db.transaction(lambda tx: tx.shard_leases.acquire("scheduler-1", 100, 120.0))
        await db.transaction(lambda tx: tx.shard_leases.acquire("scheduler-2", 50, 120.0))
        assert running
        return Seeded(a, b, minute, herd)
    finally:
        await db.close()


@pytest.fixture(scope="module")
def seeded(api: ApiProcess) -> Seeded:
    a, b = make_tenant(api.database_url, "acme"), make_tenant(api.database_url, "globex")
    return asyncio.run(_seed(api.database_url, a, b))


def get(api: ApiProcess, path: str, token: str, **params: object) -> httpx.Response:
    return httpx.get(f"{api.url}{path}", params=params, headers={"Authorization": f"Bearer {token}"}, timeout=10)


def ok(resp: httpx.Response) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()


def only_minute(body: dict, minute: datetime) -> dict:
    [row] = [m for m in body["minutes"] if datetime.fromisoformat(m["minute"]) == minute]
    return row


def test_a_tenant_sees_its_own_lag_and_outcomes_only(api: ApiProcess, seeded: Seeded) -> None:
    lag = ok(get(api, "/v1/stats/lag", seeded.a.key, minutes=15))
    assert lag["scope"] == {"viewer": "tenant", "tenant": "acme"}
    row = only_minute(lag, seeded.minute)
    assert (row["occurrences"], row["started"]) == (3, 3)
    assert row["startP50Ms"] == pytest.approx(200, abs=1)
    assert row["startP99Ms"] == pytest.approx(200 + 0.98 * 4800, abs=1)  # percentile_cont between 200 and 5000
    assert row["dispatchP50Ms"] > 0  # inserted (dispatched) after they were due
    assert sum(m["occurrences"] for m in lag["minutes"]) == 4  # plus the one leased just now; not B's

    outcomes = ok(get(api, "/v1/stats/outcomes", seeded.a.key, minutes=15))
    row = only_minute(outcomes, seeded.minute)
    assert {k: row[k] for k in ("succeeded", "retried", "dead", "open", "leaseLost")} == {
        "succeeded": 1,
        "retried": 1,
        "dead": 1,
        "open": 1,
        "leaseLost": 0,
    }
    assert row["failureRate"] == pytest.approx(2 / 3)

    b_lag = ok(get(api, "/v1/stats/lag", seeded.b.key, minutes=15))
    [b_row] = b_lag["minutes"]
    assert (b_row["occurrences"], b_row["startP50Ms"]) == (1, pytest.approx(60_000, abs=1))
    b_out = ok(get(api, "/v1/stats/outcomes", seeded.b.key))
    assert [(m["dead"], m["succeeded"]) for m in b_out["minutes"]] == [(1, 0)]


def test_a_tenant_sees_its_own_queues_dead_letters_and_due_times(api: ApiProcess, seeded: Seeded) -> None:
    queues = ok(get(api, "/v1/stats/queues", seeded.a.key))
    assert [
        (q["kind"], q["pool"], q["tenant"], q["readyDue"], q["readyLater"], q["leased"]) for q in queues["queues"]
    ] == [("tenant", "reports", "acme", 1, 1, 1)]
    assert queues["deadLetters"] == {"count": 1, "capped": False}
    assert ok(get(api, "/v1/stats/queues", seeded.b.key))["queues"] == []

    due = ok(get(api, "/v1/stats/due", seeded.a.key, hours=3))
    assert only_minute(due, seeded.herd_minute)["due"] == 5
    assert sum(m["dispatchedAhead"] for m in due["minutes"]) == 1
    assert only_minute(ok(get(api, "/v1/stats/due", seeded.b.key, hours=3)), seeded.herd_minute)["due"] == 2
    assert ok(get(api, "/v1/stats/due", seeded.a.key, hours=1))["minutes"] == [
        m for m in due["minutes"] if datetime.fromisoformat(m["minute"]) < seeded.herd_minute
    ]


def test_status_gives_a_tenant_counts_and_the_operator_the_schedulers(api: ApiProcess, seeded: Seeded) -> None:
    mine = ok(get(api, "/v1/status", seeded.a.key))
    assert mine["scope"] == {"viewer": "tenant", "tenant": "acme"}
    assert mine["shards"] == {"total": 256, "owned": 150, "schedulers": 2, "owners": None}
    assert mine["startLag"]["windowMinutes"] == 5
    assert mine["startLag"]["started"] == 4 and mine["startLag"]["p50Ms"] is not None
    assert mine["deadLetters"]["count"] == 1
    assert {q["tenant"] for q in mine["queues"]} == {"acme"}

    everyone = ok(get(api, "/v1/status", ADMIN_TOKEN))
    assert everyone["scope"] == {"viewer": "admin", "tenant": None}
    assert [(o["owner"], o["shards"]) for o in everyone["shards"]["owners"]] == [
        ("scheduler-1", 100),
        ("scheduler-2", 50),
    ]
    assert everyone["deadLetters"]["count"] == 2
    assert everyone["startLag"]["started"] == 5


def test_the_admin_token_sees_every_tenant_or_the_one_it_names(api: ApiProcess, seeded: Seeded) -> None:
    lag = ok(get(api, "/v1/stats/lag", ADMIN_TOKEN, minutes=15))
    assert lag["scope"] == {"viewer": "admin", "tenant": None}
    assert only_minute(lag, seeded.minute)["occurrences"] == 4  # A's three and B's one
    assert only_minute(ok(get(api, "/v1/stats/due", ADMIN_TOKEN, hours=3)), seeded.herd_minute)["due"] == 7
    assert {q["tenant"] for q in ok(get(api, "/v1/stats/queues", ADMIN_TOKEN))["queues"]} == {"acme"}

    for tenant in (seeded.a, seeded.b):
        picked = ok(get(api, "/v1/stats/lag", ADMIN_TOKEN, minutes=15, tenant=tenant.name))
        assert picked["scope"] == {"viewer": "admin", "tenant": tenant.name}
        assert picked["minutes"] == ok(get(api, "/v1/stats/lag", tenant.key, minutes=15))["minutes"]
    names = ok(get(api, "/v1/stats/tenants", ADMIN_TOKEN))["tenants"]
    assert {"acme", "globex"} <= set(names)


def problem(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    body = resp.json()
    assert body["status"] == status and body["type"].startswith("https://kairos.dev/problems/") and body["title"]
    return body


@pytest.mark.parametrize(
    "path",
    ["/v1/status", "/v1/stats/lag", "/v1/stats/outcomes", "/v1/stats/queues", "/v1/stats/due", "/v1/stats/tenants"],
)
def test_a_bad_token_is_a_401_problem(api: ApiProcess, path: str) -> None:
    for headers in (
        {},
        {"Authorization": "Bearer " + ADMIN_TOKEN + "x"},
        {"Authorization": "Bearer nope"},
        {"Authorization": ADMIN_TOKEN},
    ):
        resp = httpx.get(f"{api.url}{path}", headers=headers, timeout=10)
        problem(resp, 401)
        assert resp.headers["www-authenticate"] == "Bearer"


def test_bad_parameters_are_problems_naming_the_field(api: ApiProcess, seeded: Seeded) -> None:
    for path, params, field in (
        ("/v1/stats/lag", {"minutes": 0}, "minutes"),
        ("/v1/stats/outcomes", {"minutes": 1441}, "minutes"),
        ("/v1/stats/due", {"hours": 25}, "hours"),
        ("/v1/stats/due", {"hours": -1}, "hours"),
    ):
        body = problem(get(api, path, seeded.a.key, **params), 422)
        assert body["field"] == field and "between 1 and" in body["detail"]
    assert problem(get(api, "/v1/stats/lag", ADMIN_TOKEN, tenant=""), 422)["field"] == "tenant"
    assert problem(get(api, "/v1/stats/lag", seeded.a.key, minutes="soon"), 422)["field"] == "minutes"
    assert "admin token" in problem(get(api, "/v1/stats/lag", seeded.a.key, tenant="globex"), 403)["detail"]
    problem(get(api, "/v1/stats/tenants", seeded.a.key), 403)
    assert "no-such-tenant" in problem(get(api, "/v1/status", ADMIN_TOKEN, tenant="no-such-tenant"), 404)["detail"]


def test_the_dashboard_and_its_scripts_come_from_this_origin(api: ApiProcess) -> None:
    page = httpx.get(f"{api.url}/dashboard", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self';" in csp and "connect-src 'self'" in csp
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert "/dashboard/assets/plotly-basic.min.js" in sources and all(s.startswith("/") for s in sources), sources
    # plotly.js's basic bundle (scatter and bar are all the charts use), shipped as our package data.
    plotly = httpx.get(f"{api.url}/dashboard/assets/plotly-basic.min.js", timeout=10)
    assert plotly.status_code == 200 and plotly.headers["content-type"].startswith("text/javascript")
    assert plotly.text.lstrip().startswith("/**\n* plotly.js (basic - minified) v")
    assert 500_000 < len(plotly.content) < 2_000_000
    for name in ("dashboard.js", "dashboard.css", "favicon.svg"):
        assert httpx.get(f"{api.url}/dashboard/assets/{name}", timeout=10).status_code == 200
    problem(httpx.get(f"{api.url}/dashboard/assets/..%2Fapp.py", timeout=10), 404)
    problem(httpx.get(f"{api.url}/dashboard/assets/plotly.js", timeout=10), 404)


def test_the_openapi_page_serves_swagger_ui_locally_and_documents_the_routes(api: ApiProcess) -> None:
    page = httpx.get(f"{api.url}/schema", timeout=10)
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert set(sources) == {
        "/schema/assets/swagger-ui.css",
        "/schema/assets/swagger-ui-bundle.js",
        "/schema/assets/swagger-ui-standalone-preset.js",
    }
    assert "cdn" not in page.text.lower()
    for src in sources:
        resp = httpx.get(f"{api.url}{src}", timeout=10)
        assert resp.status_code == 200 and len(resp.content) > 10_000, src
    doc = httpx.get(f"{api.url}/schema/openapi.json", timeout=10).json()
    assert {"/v1/status", "/v1/stats/lag", "/v1/stats/outcomes", "/v1/stats/queues", "/v1/stats/due"} <= set(
        doc["paths"]
    )
    params = {p["name"] for p in doc["paths"]["/v1/stats/lag"]["get"]["parameters"]}
    assert {"minutes", "tenant"} <= params
