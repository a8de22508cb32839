"""One rule for invalid requests, on every route with a body: 400 for a body that is not JSON, 422
for JSON that breaks the schema, ``field`` a JSON Pointer into the body (a parameter's own name for
query and header parameters), enums listing their values, ranges their limit, 413 its size."""

from __future__ import annotations

import httpx
import pytest

from app.config import PAYLOAD_MAX_BYTES_DEFAULT
from tests.api.conftest import ApiProcess, TenantKey, query
from tests.api.test_dead_letters_api import dead_execution
from tests.api.test_jobs_api import PROBLEM, once_job

JSON = {"content-type": "application/json"}
NO_ID = "00000000-0000-4000-8000-000000000000"


def problem_of(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    problem = resp.json()
    assert problem["status"] == status and problem["title"] and problem["detail"]
    return problem


def body_routes(client: httpx.Client, api: ApiProcess) -> list[str]:
    job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    _, execution_id = dead_execution(api, client, attempts=1)
    return [
        "/v1/jobs",
        "/v1/jobs:batch",
        f"/v1/jobs/{job_id}:resume",
        f"/v1/executions/{execution_id}:replay",
        "/v1/dead-letters:replay",
    ]


def test_a_body_that_is_not_json_is_400_without_a_field_on_every_route(api: ApiProcess, client: httpx.Client) -> None:
    for path in body_routes(client, api):
        for raw in (b"{not json", b'{"name": "x"', b"\xff"):
            problem = problem_of(client.post(path, content=raw, headers=JSON), 400)
            assert problem["type"].endswith("/malformed-request") and "field" not in problem, (path, problem)


def test_json_of_the_wrong_shape_is_422_naming_the_whole_body_on_every_route(
    api: ApiProcess, client: httpx.Client
) -> None:
    for path in body_routes(client, api):
        problem = problem_of(client.post(path, json=[1]), 422)
        assert problem["field"] == "", (path, problem)


def test_a_missing_field_is_pointed_at_by_its_own_name(client: httpx.Client) -> None:
    body = once_job()
    del body["name"]
    problem = problem_of(client.post("/v1/jobs", json=body), 422)
    assert (problem["field"], problem["detail"]) == ("/name", "is required")
    problem = problem_of(client.post("/v1/jobs", json=once_job(target={"type": "http"})), 422)
    assert problem["field"] == "/target/ref"
    assert problem_of(client.post("/v1/jobs", content=b"", headers=JSON), 400)


def test_an_unknown_field_is_pointed_at_and_the_known_ones_listed(client: httpx.Client) -> None:
    problem = problem_of(client.post("/v1/jobs", json=once_job(retry={"maxAttempt": 3})), 422)
    assert problem["field"] == "/retry/maxAttempt"
    assert "maxAttempts" in problem["detail"] and "backoffSeconds" in problem["detail"]


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"schedule": {"delaySeconds": "90"}}, "/schedule/delaySeconds"),
        ({"timeoutSeconds": "300"}, "/timeoutSeconds"),
        ({"timeoutSeconds": 2.5}, "/timeoutSeconds"),
        ({"retry": {"maxAttempts": "3"}}, "/retry/maxAttempts"),
        ({"retry": {"backoffSeconds": "10"}}, "/retry/backoffSeconds"),
        ({"schedule": {"cron": "0 9 * * *", "tz": "UTC", "jitterSeconds": "60"}}, "/schedule/jitterSeconds"),
        ({"dryRun": "true"}, "/dryRun"),
    ],
)
def test_numbers_and_booleans_are_strict_json(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, override: dict, field: str
) -> None:
    problem = problem_of(client.post("/v1/jobs", json=once_job(**override)), 422)
    assert problem["field"] == field, problem
    assert query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,))[0][0] == 0


def test_a_fractional_delay_is_a_number_like_any_other(client: httpx.Client) -> None:
    assert client.post("/v1/jobs", json=once_job(schedule={"delaySeconds": 2.5})).status_code == 201
    assert client.post("/v1/jobs", json=once_job(schedule={"delaySeconds": 90})).status_code == 201


def test_the_replay_bodies_are_strict_too(api: ApiProcess, client: httpx.Client) -> None:
    _, execution_id = dead_execution(api, client, attempts=1)
    problem = problem_of(
        client.post(f"/v1/executions/{execution_id}:replay", json={"retry": {"maxAttempts": "3"}}), 422
    )
    assert problem["field"] == "/retry/maxAttempts"
    problem = problem_of(client.post(f"/v1/executions/{execution_id}:replay", json={"retry": {"maxAttempts": 0}}), 422)
    assert problem["field"] == "/retry/maxAttempts" and "between 1 and 100" in problem["detail"]
    assert problem_of(client.post("/v1/dead-letters:replay", json={"limit": "5"}), 422)["field"] == "/limit"
    problem = problem_of(client.post("/v1/dead-letters:replay", json={"limit": 0}), 422)
    assert problem["field"] == "/limit" and "1000" in problem["detail"]
    assert problem_of(client.post("/v1/dead-letters:replay", json={"jobId": "nope"}), 422)["field"] == "/jobId"


def test_an_enum_problem_lists_the_values(client: httpx.Client) -> None:
    problem = problem_of(client.post("/v1/jobs", json=once_job(concurrency="sometimes")), 422)
    assert problem["field"] == "/concurrency"
    assert "'allow', 'buffer_one', 'forbid', 'replace'" in problem["detail"] and "sometimes" in problem["detail"]
    problem = problem_of(client.post("/v1/jobs", json=once_job(target={"type": "ftp", "ref": "x"})), 422)
    assert problem["field"] == "/target/type" and "'http'" in problem["detail"] and "'queue'" in problem["detail"]
    job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    client.post(f"/v1/jobs/{job_id}:pause")
    problem = problem_of(client.post(f"/v1/jobs/{job_id}:resume", json={"missed": "sometimes"}), 422)
    assert problem["field"] == "/missed" and "'skip'" in problem["detail"] and "'run_once'" in problem["detail"]


def test_a_range_problem_states_the_limit(client: httpx.Client) -> None:
    problem = problem_of(client.post("/v1/jobs", json=once_job(timeoutSeconds=0)), 422)
    assert problem["field"] == "/timeoutSeconds" and "between 1 and 86400" in problem["detail"]
    problem = problem_of(client.get("/v1/jobs", params={"limit": 0}), 422)
    assert problem["field"] == "limit" and "500" in problem["detail"]


def test_batch_items_are_pointed_at_from_the_batchs_root(client: httpx.Client) -> None:
    items = [
        once_job(),
        once_job(),
        once_job(),
        once_job(name=""),
        once_job(schedule={"delaySeconds": "90"}),
        {**once_job(), "idempotencyKey": ""},
        {**once_job(), "idempotencyKey": "k" * 256},
    ]
    results = client.post("/v1/jobs:batch", json={"jobs": items}).json()["results"]
    assert [r.get("error", {}).get("field") for r in results] == [
        None,
        None,
        None,
        "/jobs/3/name",
        "/jobs/4/schedule/delaySeconds",
        "/jobs/5/idempotencyKey",
        "/jobs/6/idempotencyKey",
    ]
    assert all(r["error"]["status"] == 422 for r in results[3:])


def test_parameters_are_named_as_sent_and_refused_with_422(api: ApiProcess, client: httpx.Client) -> None:
    for path, params, field in (
        ("/v1/jobs", {"limit": "x"}, "limit"),
        ("/v1/jobs", {"state": "sleeping"}, "state"),
        ("/v1/jobs", {"cursor": "garbage"}, "cursor"),
        ("/v1/dead-letters", {"jobId": "nope"}, "jobId"),
        ("/v1/schedules/preview", {"cron": "* * * * *", "tz": "UTC", "count": "x"}, "count"),
        ("/v1/schedules/preview", {"cron": "* * * * *", "tz": "UTC", "count": 0}, "count"),
    ):
        problem = problem_of(client.get(path, params=params), 422)
        assert problem["field"] == field, (path, params, problem)
    long_key = client.post("/v1/jobs", json=once_job(), headers={"Idempotency-Key": "k" * 256})
    assert problem_of(long_key, 422)["field"] == "Idempotency-Key"


def test_a_body_over_the_limit_is_413_stating_the_limit(client: httpx.Client) -> None:
    limit = PAYLOAD_MAX_BYTES_DEFAULT + 64 * 1024  # a job's largest payload and the rest of its body
    problem = problem_of(client.post("/v1/jobs", content=b" " * (limit + 1), headers=JSON), 413)
    assert f"{limit} bytes" in problem["detail"] and problem["maxBytes"] == limit
    problem = problem_of(client.post("/v1/jobs:batch", content=b" " * (16 * 1024 * 1024 + 1), headers=JSON), 413)
    assert "16777216 bytes" in problem["detail"] and problem["maxBytes"] == 16 * 1024 * 1024
