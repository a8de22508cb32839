"""POST /v1/jobs:batch over real HTTP: items validated on their own, valid ones committed together."""

from __future__ import annotations

import concurrent.futures

import httpx

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.api.test_jobs_api import PROBLEM, once_job


def jobs_of(api: ApiProcess, tenant: TenantKey) -> int:
    return query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,))[0][0]


def due_of(api: ApiProcess, tenant: TenantKey) -> int:
    return query(api.database_url, "SELECT count(*) FROM due_index WHERE tenant_id = %s", (tenant.tenant_id,))[0][0]


def test_an_empty_batch_answers_no_results(client: httpx.Client) -> None:
    resp = client.post("/v1/jobs:batch", json={"jobs": []})
    assert resp.status_code == 200
    assert resp.json() == {"results": []}


def test_results_come_in_request_order_with_errors_naming_index_and_field(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    items = [
        once_job(name="first"),
        once_job(name=""),
        once_job(schedule={"delaySeconds": "soon"}),
        once_job(name="fourth", target={"type": "queue", "ref": "emails"}),
        7,
        once_job(payload={"k": "nul\u0000"}),
    ]
    resp = client.post("/v1/jobs:batch", json={"jobs": items})
    assert resp.status_code == 200, resp.text
    results = resp.json()["results"]
    assert len(results) == len(items)
    assert set(results[0]) == {"jobId", "nextRunAt"} and set(results[3]) == {"jobId", "nextRunAt"}
    # Each field is a JSON Pointer from the batch's root: the item, then the field inside it.
    for index, field in (
        (1, "/jobs/1/name"),
        (2, "/jobs/2/schedule/delaySeconds"),
        (4, "/jobs/4"),
        (5, "/jobs/5/payload"),
    ):
        assert results[index]["index"] == index
        assert results[index]["error"]["status"] == 422
        assert results[index]["error"]["field"] == field, results[index]
    assert client.get(f"/v1/jobs/{results[0]['jobId']}").json()["name"] == "first"
    assert client.get(f"/v1/jobs/{results[3]['jobId']}").json()["target"]["ref"] == "emails"
    assert (jobs_of(api, tenant), due_of(api, tenant)) == (2, 2)


def test_idempotency_keys_hold_per_item_as_for_single_submits(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, other_tenant: TenantKey
) -> None:
    body = once_job(name="keyed")
    items = [
        {**body, "idempotencyKey": "k-1"},
        {**body, "idempotencyKey": "k-1"},
        {**once_job(name="changed"), "idempotencyKey": "k-1"},
        {**body, "idempotencyKey": "k-2"},
    ]
    results = client.post("/v1/jobs:batch", json={"jobs": items}).json()["results"]
    assert results[0]["jobId"] == results[1]["jobId"] != results[3]["jobId"]
    assert results[2]["error"]["status"] == 409 and results[2]["index"] == 2
    # The same key and body as a single submit finds the same job; a changed body conflicts.
    single = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "k-1"})
    assert single.status_code == 201 and single.json()["jobId"] == results[0]["jobId"]
    assert client.post("/v1/jobs", json=once_job(name="changed"), headers={"Idempotency-Key": "k-1"}).status_code == 409
    again = client.post("/v1/jobs:batch", json={"jobs": [{**body, "idempotencyKey": "k-2"}]}).json()["results"]
    assert again[0]["jobId"] == results[3]["jobId"]
    # Keys are per tenant.
    theirs = httpx.post(
        f"{api.url}/v1/jobs:batch", headers=other_tenant.headers, json={"jobs": [{**body, "idempotencyKey": "k-1"}]}
    ).json()["results"]
    assert theirs[0]["jobId"] != results[0]["jobId"]
    assert jobs_of(api, tenant) == 2


def test_whole_request_errors_change_nothing(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    too_many = client.post("/v1/jobs:batch", json={"jobs": [once_job()] * 1001})
    assert too_many.status_code == 422 and too_many.json()["field"] == "/jobs"
    assert "1000" in too_many.json()["detail"]
    not_json = client.post("/v1/jobs:batch", content=b"{nope", headers={"content-type": "application/json"})
    assert not_json.status_code == 400 and not_json.headers["content-type"].startswith(PROBLEM)
    wrong_shape = client.post("/v1/jobs:batch", json={"jobs": {"name": "x"}})
    assert wrong_shape.status_code == 422 and wrong_shape.json()["field"] == "/jobs"
    unknown = client.post("/v1/jobs:batch", json={"jobs": [], "extra": 1})
    assert unknown.status_code == 422 and unknown.json()["field"] == "/extra"
    assert httpx.post(f"{api.url}/v1/jobs:batch", json={"jobs": [once_job()]}).status_code == 401
    assert jobs_of(api, tenant) == 0


def test_a_thousand_jobs_commit_with_their_due_rows(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    resp = client.post("/v1/jobs:batch", json={"jobs": [once_job(name=f"j{i}") for i in range(1000)]})
    assert resp.status_code == 200
    assert all("jobId" in r for r in resp.json()["results"])
    assert (jobs_of(api, tenant), due_of(api, tenant)) == (1000, 1000)


def test_concurrent_single_submits_each_create_one_job(api: ApiProcess, tenant: TenantKey) -> None:
    def submit(i: int) -> str:
        resp = httpx.post(f"{api.url}/v1/jobs", json=once_job(name=f"c{i}"), headers=tenant.headers, timeout=30)
        assert resp.status_code == 201, resp.text
        return resp.json()["jobId"]

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        ids = list(pool.map(submit, range(300)))
    assert len(set(ids)) == 300
    assert (jobs_of(api, tenant), due_of(api, tenant)) == (300, 300)


def test_the_openapi_document_describes_the_batch_body(api: ApiProcess) -> None:
    doc = httpx.get(f"{api.url}/schema/openapi.json").json()
    body = doc["paths"]["/v1/jobs:batch"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    # Each item is a BatchItemIn, but any item is taken (one that is not gets its own problem in results).
    items = body["properties"]["jobs"]["items"]["anyOf"]
    assert body["properties"]["jobs"]["maxItems"] == 1000
    assert {"$ref": "#/components/schemas/BatchItemIn"} in items
    item, job = doc["components"]["schemas"]["BatchItemIn"], doc["components"]["schemas"]["JobIn"]
    assert set(item["properties"]) == set(job["properties"]) | {"idempotencyKey"}
    assert item["properties"]["idempotencyKey"]["maxLength"] == 255
