"""Per-tenant submit quotas over real HTTP: 429 with Retry-After and a problem naming the quota,
and nothing written for what was refused (docs/quotas.md).

Each test's tenant gets its quotas before its first request, so the API process reads them fresh.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from app.store.db import Database, create_engine
from tests.api.conftest import ApiProcess, TenantKey, query
from tests.api.test_jobs_api import PROBLEM, once_job


def set_quota(api: ApiProcess, tenant: TenantKey, **quota: int | None) -> None:
    async def work() -> None:
        db = Database(create_engine(api.database_url, pool_size=1))
        try:
            await db.transaction(lambda c: c.tenants.set_quota(tenant.tenant_id, **quota))  # type: ignore[arg-type]
        finally:
            await db.close()

    asyncio.run(work())


def rows(api: ApiProcess, tenant: TenantKey) -> tuple[int, int]:
    """(jobs, due_index rows) of the tenant."""
    [(jobs, due)] = query(
        api.database_url,
        "SELECT (SELECT count(*) FROM jobs WHERE tenant_id = %(t)s), "
        "(SELECT count(*) FROM due_index WHERE tenant_id = %(t)s)",
        {"t": tenant.tenant_id},
    )
    return jobs, due


def assert_quota_problem(problem: dict[str, Any], quota: str, limit: int) -> None:
    assert problem["status"] == 429
    assert problem["type"] == "https://kairos.dev/problems/quota-exceeded"
    assert problem["quota"] == quota and problem["limit"] == limit
    assert isinstance(problem["retryAfterSeconds"], int) and problem["retryAfterSeconds"] >= 1


def test_over_the_active_jobs_quota_a_submit_is_429_and_writes_nothing(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_active_jobs=3)
    made = [client.post("/v1/jobs", json=once_job(name=f"j{i}")) for i in range(3)]
    assert [r.status_code for r in made] == [201, 201, 201]
    refused = client.post("/v1/jobs", json=once_job(name="one-too-many"))
    assert refused.status_code == 429, refused.text
    assert refused.headers["content-type"].startswith(PROBLEM)
    assert refused.headers["retry-after"] == str(refused.json()["retryAfterSeconds"])
    assert_quota_problem(refused.json(), "maxActiveJobs", 3)
    assert "3 active jobs" in refused.json()["detail"]
    assert rows(api, tenant) == (3, 3)
    # Cancelling one frees its place at once: the count is read, not cached.
    assert client.delete(f"/v1/jobs/{made[0].json()['jobId']}").status_code == 204
    assert client.post("/v1/jobs", json=once_job(name="after-cancel")).status_code == 201


def test_a_batch_over_the_active_jobs_quota_refuses_item_by_item(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_active_jobs=4)
    assert client.post("/v1/jobs", json=once_job(name="first")).status_code == 201
    items = [
        once_job(name="a"),
        once_job(name=""),
        once_job(name="b"),
        once_job(name="c"),
        once_job(name="d"),
        once_job(name="e"),
    ]
    resp = client.post("/v1/jobs:batch", json={"jobs": items})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert [("jobId" in r) for r in results] == [True, False, True, True, False, False]
    assert results[1]["error"]["status"] == 422  # an invalid item takes no place
    for index in (4, 5):
        assert results[index]["index"] == index
        assert_quota_problem(results[index]["error"], "maxActiveJobs", 4)
        assert results[index]["error"]["instance"] == f"/v1/jobs:batch#/jobs/{index}"
    assert rows(api, tenant) == (4, 4)


def test_over_the_submit_rate_a_submit_is_429_with_retry_after_and_writes_nothing(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_submit_per_s=1)
    statuses: list[int] = []
    refused = None
    # One token a second: submits in a row find the bucket empty within a few tries.
    for i in range(20):
        resp = client.post("/v1/jobs", json=once_job(name=f"r{i}"))
        statuses.append(resp.status_code)
        if resp.status_code == 429:
            refused = resp
            break
    assert refused is not None, statuses
    assert set(statuses[:-1]) == {201}
    assert refused.headers["retry-after"] == "1"
    assert_quota_problem(refused.json(), "maxSubmitPerSecond", 1)
    assert rows(api, tenant) == (len(statuses) - 1,) * 2


def test_a_batch_counts_its_items_against_the_submit_rate(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_submit_per_s=3)
    # A new tenant's bucket is full (3 tokens): 3 of 5 items go in, the others are refused one by one.
    results = client.post("/v1/jobs:batch", json={"jobs": [once_job(name=f"b{i}") for i in range(5)]}).json()["results"]
    assert [("jobId" in r) for r in results] == [True, True, True, False, False]
    for r in results[3:]:
        assert_quota_problem(r["error"], "maxSubmitPerSecond", 3)
    assert rows(api, tenant) == (3, 3)
    # Once the bucket holds no whole token, the call is refused whole.
    whole = None
    for _ in range(20):
        resp = client.post("/v1/jobs:batch", json={"jobs": [once_job(name="x"), once_job(name="y")]})
        if resp.status_code == 429:
            whole = resp
            break
        assert resp.status_code == 200
    assert whole is not None
    assert whole.headers["retry-after"] == str(whole.json()["retryAfterSeconds"])
    assert_quota_problem(whole.json(), "maxSubmitPerSecond", 3)
    created = query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,))[0][0]
    assert rows(api, tenant) == (created, created)


def test_quotas_are_per_tenant(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, other_tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_active_jobs=1, max_submit_per_s=1)
    assert client.post("/v1/jobs", json=once_job()).status_code == 201
    assert client.post("/v1/jobs", json=once_job()).status_code == 429
    other = [client.post("/v1/jobs", json=once_job(), headers=other_tenant.headers) for _ in range(5)]
    assert [r.status_code for r in other] == [201] * 5


def test_the_openapi_document_shows_the_429_and_its_retry_after(api: ApiProcess) -> None:
    doc = httpx.get(f"{api.url}/schema/openapi.json").json()
    for path, method in (("/v1/jobs", "post"), ("/v1/jobs:batch", "post"), ("/v1/jobs", "get")):
        answer = doc["paths"][path][method]["responses"]["429"]
        assert "Retry-After" in answer["headers"], (path, method)
        assert PROBLEM in answer["content"]
    problem = doc["components"]["schemas"]["Problem"]["properties"]
    assert problem["quota"]["enum"] == [
        "maxActiveJobs",
        "maxSubmitPerSecond",
        "maxManualRunsPerSecond",
        "maxManualInFlight",
        "bulkReplayPerWindow",
    ]
    assert {"limit", "retryAfterSeconds"} <= set(problem)


# -- manual runs and backfills: executions made outside the schedule have their own bounds ---------------


def executions(api: ApiProcess, tenant: TenantKey) -> int:
    return query(api.database_url, "SELECT count(*) FROM executions WHERE tenant_id = %s", (tenant.tenant_id,))[0][0]


def minutely_job(client: httpx.Client) -> str:
    resp = client.post("/v1/jobs", json=once_job(schedule={"cron": "* * * * *", "tz": "UTC"}, concurrency="allow"))
    assert resp.status_code == 201, resp.text
    return str(resp.json()["jobId"])


def backfill_body(minutes: int) -> dict[str, str]:
    end = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=1)
    return {
        "from": (end - timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z"),
        "to": end.isoformat().replace("+00:00", "Z"),
    }


def test_over_the_manual_run_rate_a_run_is_429_and_writes_nothing(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_manual_per_s=2)
    job_id = minutely_job(client)
    statuses: list[int] = []
    refused = None
    for _ in range(20):
        resp = client.post(f"/v1/jobs/{job_id}:run", json={"overlap": "allow"})
        statuses.append(resp.status_code)
        if resp.status_code == 429:
            refused = resp
            break
    assert refused is not None, statuses
    assert set(statuses[:-1]) == {202}
    assert refused.headers["content-type"].startswith(PROBLEM)
    assert refused.headers["retry-after"] == str(refused.json()["retryAfterSeconds"])
    assert_quota_problem(refused.json(), "maxManualRunsPerSecond", 2)
    assert executions(api, tenant) == len(statuses) - 1


def test_a_backfill_takes_one_token_per_occurrence_and_continues_later(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_manual_per_s=5)
    job_id = minutely_job(client)
    first = client.post(f"/v1/jobs/{job_id}:backfill", json=backfill_body(100))
    assert first.status_code == 202, first.text
    # The bucket held 5 tokens: 5 occurrences now, and where to go on from once it has refilled.
    assert first.json()["created"] == 5 and first.json()["nextFrom"] is not None
    assert executions(api, tenant) == 5
    refused = None
    for _ in range(20):
        resp = client.post(f"/v1/jobs/{job_id}:backfill", json={**backfill_body(100), "from": first.json()["nextFrom"]})
        if resp.status_code == 429:
            refused = resp
            break
        assert resp.status_code == 202
    assert refused is not None
    assert_quota_problem(refused.json(), "maxManualRunsPerSecond", 5)
    made = executions(api, tenant)
    assert made < 100  # nowhere near the 100 asked for
    assert client.post(f"/v1/jobs/{job_id}:run", json={"overlap": "allow"}).status_code == 429
    assert executions(api, tenant) == made


def test_over_the_manual_in_flight_quota_runs_and_backfills_are_429(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    set_quota(api, tenant, max_manual_inflight=3)
    job_id = minutely_job(client)
    made = [client.post(f"/v1/jobs/{job_id}:run", json={"overlap": "allow"}) for _ in range(3)]
    assert [r.status_code for r in made] == [202] * 3
    refused = client.post(f"/v1/jobs/{job_id}:run", json={"overlap": "allow"})
    assert refused.status_code == 429, refused.text
    assert refused.headers["retry-after"] == str(refused.json()["retryAfterSeconds"])
    assert_quota_problem(refused.json(), "maxManualInFlight", 3)
    backfill = client.post(f"/v1/jobs/{job_id}:backfill", json=backfill_body(10))
    assert backfill.status_code == 429
    assert_quota_problem(backfill.json(), "maxManualInFlight", 3)
    assert executions(api, tenant) == 3
    # A finished one frees its place (counted, not cached).
    query(
        api.database_url,
        "UPDATE executions SET state = 'cancelled', finished_at = now() WHERE execution_id = %s",
        (made[0].json()["executionId"],),
    )
    again = client.post(f"/v1/jobs/{job_id}:backfill", json=backfill_body(10))
    assert again.status_code == 202 and again.json()["created"] == 1 and again.json()["nextFrom"] is not None
    assert executions(api, tenant) == 4
