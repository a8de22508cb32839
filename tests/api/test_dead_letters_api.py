"""Replaying dead letters over real HTTP: the attempt budget in the tenant's terms."""

from __future__ import annotations

import httpx

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.api.test_jobs_api import PROBLEM, once_job


def dead_execution(api: ApiProcess, client: httpx.Client, attempts: int) -> tuple[str, str]:
    """A queue job and one execution of it that spent all ``attempts`` and died."""
    job_id = client.post(
        "/v1/jobs", json=once_job(target={"type": "queue", "ref": "emails"}, retry={"maxAttempts": attempts})
    ).json()["jobId"]
    [(execution_id,)] = query(
        api.database_url,
        """
        INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                                started_at, finished_at, error)
        SELECT job_id, tenant_id, queue, now() - interval '1 hour', %s, %s, 'dead', now(), now(), now(), 'boom'
        FROM jobs WHERE job_id = %s RETURNING execution_id::text""",
        (attempts, attempts, job_id),
    )
    return job_id, execution_id


def test_replay_grants_the_attempts_asked_for_and_answers_in_the_same_terms(
    api: ApiProcess, client: httpx.Client
) -> None:
    _, execution_id = dead_execution(api, client, attempts=3)
    resp = client.post(f"/v1/executions/{execution_id}:replay", json={"retry": {"maxAttempts": 3}})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    # Three attempts were spent; the replay grants three more, so the last one is attempt 6.
    assert (body["state"], body["attempt"], body["maxAttempts"], body["lastAttempt"]) == ("ready", 3, 3, 6)
    row = query(
        api.database_url, "SELECT attempt, max_attempts FROM executions WHERE execution_id = %s", (execution_id,)
    )
    assert row == [(3, 6)]


def test_replay_without_a_retry_override_grants_the_jobs_max_attempts(api: ApiProcess, client: httpx.Client) -> None:
    _, execution_id = dead_execution(api, client, attempts=2)
    body = client.post(f"/v1/executions/{execution_id}:replay").json()
    assert (body["attempt"], body["maxAttempts"], body["lastAttempt"]) == (2, 2, 4)


def test_replaying_an_execution_that_is_not_dead_is_a_conflict_about_the_execution(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    _, execution_id = dead_execution(api, client, attempts=1)
    assert client.post(f"/v1/executions/{execution_id}:replay").status_code == 200
    again = client.post(f"/v1/executions/{execution_id}:replay")
    assert again.status_code == 409 and again.headers["content-type"].startswith(PROBLEM)
    problem = again.json()
    assert problem["title"] == "The execution is not in a state that allows this."
    assert "job" not in problem["title"].lower() and "ready" in problem["detail"]


def test_the_openapi_document_says_what_max_attempts_means(api: ApiProcess) -> None:
    schemas = httpx.get(f"{api.url}/schema/openapi.json").json()["components"]["schemas"]
    asked = schemas["RetryOverride"]["properties"]["maxAttempts"]
    described = asked.get("description") or " ".join(s.get("description", "") for s in asked.get("oneOf", []))
    assert "counted from the replay" in described
    answered = schemas["ReplayedOut"]["properties"]
    assert "counted from the replay" in answered["maxAttempts"]["description"]
    assert "lastAttempt" in answered and answered["lastAttempt"]["description"]
