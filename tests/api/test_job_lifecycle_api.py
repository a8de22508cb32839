"""How a job ends, over real HTTP: pauseOnFailure, maxRuns and deleteAfterCompletionSeconds through submit,
batch submit, PATCH, GET and the list, their refusals (RFC 9457, nothing changed) and the OpenAPI document."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import ApiProcess, query
from tests.api.test_jobs_api import PROBLEM, once_job


def every_job(**overrides) -> dict:
    body = once_job(schedule={"every": "1h"})
    body.update(overrides)
    return body


def count_jobs(client: httpx.Client) -> int:
    return len(client.get("/v1/jobs", params={"limit": 200}).json()["jobs"])


def test_a_recurring_job_carries_its_lifecycle_options_on_get_and_in_the_list(client: httpx.Client) -> None:
    body = every_job(name="lifecycle", pauseOnFailure=True, maxRuns=3, deleteAfterCompletionSeconds=86400)
    created = client.post("/v1/jobs", json=body)
    assert created.status_code == 201, created.text
    job_id = created.json()["jobId"]
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert (job["pauseOnFailure"], job["maxRuns"], job["remainingRuns"]) == (True, 3, 3)
    assert job["deleteAfterCompletionSeconds"] == 86400 and job["pausedReason"] is None
    [listed] = [j for j in client.get("/v1/jobs").json()["jobs"] if j["jobId"] == job_id]
    assert (listed["pauseOnFailure"], listed["maxRuns"], listed["deleteAfterCompletionSeconds"]) == (True, 3, 86400)
    plain = client.get(f"/v1/jobs/{client.post('/v1/jobs', json=every_job()).json()['jobId']}").json()
    assert (plain["pauseOnFailure"], plain["maxRuns"], plain["remainingRuns"]) == (False, None, None)
    assert plain["deleteAfterCompletionSeconds"] is None
    one_off = client.post("/v1/jobs", json=once_job(deleteAfterCompletionSeconds=0))
    assert one_off.status_code == 201, one_off.text  # removal applies to any job


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (once_job(pauseOnFailure=True), "/pauseOnFailure"),
        (once_job(maxRuns=2), "/maxRuns"),
        (every_job(maxRuns=0), "/maxRuns"),
        (every_job(maxRuns="3"), "/maxRuns"),
        (every_job(deleteAfterCompletionSeconds=-1), "/deleteAfterCompletionSeconds"),
        (every_job(deleteAfterCompletionSeconds=366 * 86400 + 1), "/deleteAfterCompletionSeconds"),
        (every_job(pauseOnFailure="yes"), "/pauseOnFailure"),
    ],
)
def test_bad_lifecycle_options_are_refused_and_store_nothing(client: httpx.Client, body: dict, field: str) -> None:
    before = count_jobs(client)
    resp = client.post("/v1/jobs", json=body)
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM) and resp.json()["field"] == field
    assert count_jobs(client) == before


def test_a_batch_item_with_a_bad_option_is_refused_alone(client: httpx.Client) -> None:
    resp = client.post(
        "/v1/jobs:batch", json={"jobs": [every_job(maxRuns=2, pauseOnFailure=True), once_job(pauseOnFailure=True)]}
    )
    assert resp.status_code in (200, 207), resp.text
    good, bad = resp.json()["results"]
    assert bad["error"]["field"] == "/jobs/1/pauseOnFailure" and "recurring" in bad["error"]["detail"]
    job = client.get(f"/v1/jobs/{good['jobId']}").json()
    assert (job["maxRuns"], job["pauseOnFailure"]) == (2, True)


def test_patch_sets_raises_and_removes_a_run_limit_never_below_the_runs_started(
    api: ApiProcess, client: httpx.Client
) -> None:
    job_id = client.post("/v1/jobs", json=every_job()).json()["jobId"]
    set_limit = client.patch(f"/v1/jobs/{job_id}", json={"maxRuns": 5, "pauseOnFailure": True})
    assert set_limit.status_code == 200, set_limit.text
    assert (set_limit.json()["maxRuns"], set_limit.json()["remainingRuns"]) == (5, 5)
    query(api.database_url, "UPDATE jobs SET run_count = 3 WHERE job_id = %s", (job_id,))  # three dispatched
    version = client.get(f"/v1/jobs/{job_id}").json()["version"]
    too_low = client.patch(f"/v1/jobs/{job_id}", json={"maxRuns": 3})
    assert too_low.status_code == 422 and too_low.json()["field"] == "/maxRuns"
    assert "started 3" in too_low.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}").json()["version"] == version  # nothing changed
    raised = client.patch(f"/v1/jobs/{job_id}", json={"maxRuns": 10}).json()
    assert (raised["maxRuns"], raised["remainingRuns"], raised["pauseOnFailure"]) == (10, 7, True)
    removed = client.patch(f"/v1/jobs/{job_id}", json={"maxRuns": None, "deleteAfterCompletionSeconds": 60}).json()
    assert (removed["maxRuns"], removed["remainingRuns"], removed["deleteAfterCompletionSeconds"]) == (None, None, 60)
    again = client.patch(f"/v1/jobs/{job_id}", json={"maxRuns": 2}).json()
    assert again["remainingRuns"] == 2  # a new limit counts from when it is set
    to_once = client.patch(f"/v1/jobs/{job_id}", json={"schedule": {"delaySeconds": 60}})
    assert to_once.status_code == 422 and to_once.json()["field"] in ("/pauseOnFailure", "/maxRuns")


def test_a_job_paused_on_failure_shows_why_until_resumed(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=every_job(pauseOnFailure=True)).json()["jobId"]
    reason = "pauseOnFailure: execution 0 was dead-lettered after 1 attempt: HTTP 500"
    query(
        api.database_url,
        "UPDATE jobs SET state = 'paused', paused_at = now(), paused_reason = %s WHERE job_id = %s",
        (reason, job_id),
    )
    query(api.database_url, "DELETE FROM due_index WHERE job_id = %s", (job_id,))
    query(
        api.database_url,
        """INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                                   finished_at, error)
           SELECT job_id, tenant_id, queue, now() - interval '1 hour', 1, 1, 'dead', now(), now(), 'HTTP 500'
           FROM jobs WHERE job_id = %s""",
        (job_id,),
    )
    query(
        api.database_url,
        "UPDATE jobs SET pause_execution_id = (SELECT execution_id FROM executions WHERE job_id = %s) "
        "WHERE job_id = %s",
        (job_id, job_id),
    )
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert (job["state"], job["pausedReason"]) == ("paused", reason)
    [entry] = client.get(f"/v1/jobs/{job_id}/executions").json()
    assert (entry["state"], entry["pausedJob"]) == ("dead", True)  # the history says which dead letter paused it
    assert client.post(f"/v1/jobs/{job_id}:pause").json()["pausedReason"] == reason  # already paused: unchanged
    resumed = client.post(f"/v1/jobs/{job_id}:resume").json()
    assert (resumed["state"], resumed["pausedReason"]) == ("active", None)
    paused = client.post(f"/v1/jobs/{job_id}:pause").json()
    assert (paused["state"], paused["pausedReason"]) == ("paused", None)  # the tenant's own pause gives none
    [entry] = client.get(f"/v1/jobs/{job_id}/executions").json()
    assert entry["pausedJob"] is True  # the history keeps saying which dead letter paused it


def test_a_pause_takes_back_an_occurrence_dispatched_ahead_from_the_runs_started(
    api: ApiProcess, client: httpx.Client
) -> None:
    job_id = client.post("/v1/jobs", json=every_job(maxRuns=5)).json()["jobId"]
    query(api.database_url, "UPDATE jobs SET run_count = 2 WHERE job_id = %s", (job_id,))
    query(
        api.database_url,
        """INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at)
           SELECT job_id, tenant_id, queue, now() + interval '1 minute', 1, 'ready', now() + interval '1 minute'
           FROM jobs WHERE job_id = %s""",
        (job_id,),
    )
    paused = client.post(f"/v1/jobs/{job_id}:pause").json()
    assert (paused["state"], paused["remainingRuns"]) == ("paused", 4)


def test_the_openapi_document_describes_and_bounds_the_options(api: ApiProcess) -> None:
    schemas = httpx.get(f"{api.url}/schema/openapi.json", timeout=10).json()["components"]["schemas"]
    job_in, job_out = schemas["JobIn"]["properties"], schemas["JobOut"]["properties"]
    for name in ("pauseOnFailure", "maxRuns", "deleteAfterCompletionSeconds"):
        assert job_in[name].get("description") and job_out[name].get("description"), name
    for name in ("pausedReason", "remainingRuns"):
        assert job_out[name].get("description"), name

    def bounds(prop: dict) -> tuple:
        found = [prop, *prop.get("oneOf", []), *prop.get("anyOf", [])]
        return (
            next((p["minimum"] for p in found if "minimum" in p), None),
            next((p["maximum"] for p in found if "maximum" in p), None),
        )

    assert bounds(job_in["maxRuns"])[0] == 1
    assert bounds(job_in["deleteAfterCompletionSeconds"]) == (0, 366 * 86400)
