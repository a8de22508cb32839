"""A job's version is the tenant's: GET answers it as an ETag, and If-Match that does not match is 412."""

from __future__ import annotations

import httpx

from tests.api.conftest import ApiProcess, query
from tests.api.test_job_management import cron_job
from tests.api.test_jobs_api import PROBLEM


def test_get_answers_the_version_as_an_etag_and_a_stale_if_match_is_412(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job(name="tagged")).json()["jobId"]
    got = client.get(f"/v1/jobs/{job_id}")
    assert got.headers["etag"] == f'"{got.json()["version"]}"' == '"1"'

    changed = client.patch(f"/v1/jobs/{job_id}", json={"name": "renamed"}, headers={"If-Match": got.headers["etag"]})
    assert changed.status_code == 200, changed.text
    assert changed.headers["etag"] == '"2"' == f'"{changed.json()["version"]}"'

    stale = client.patch(f"/v1/jobs/{job_id}", json={"name": "again"}, headers={"If-Match": got.headers["etag"]})
    assert stale.status_code == 412, stale.text
    assert stale.headers["content-type"].startswith(PROBLEM)
    assert stale.json()["status"] == 412 and "version 2" in stale.json()["detail"]
    assert client.get(f"/v1/jobs/{job_id}").json()["name"] == "renamed"  # nothing changed

    # Any of a list matches; * matches the job that exists.
    listed = client.patch(f"/v1/jobs/{job_id}", json={"name": "listed"}, headers={"If-Match": '"7", "2"'})
    assert listed.status_code == 200, listed.text
    assert client.patch(f"/v1/jobs/{job_id}", json={"name": "any"}, headers={"If-Match": "*"}).status_code == 200
    # Pausing is the tenant's change too.
    paused = client.post(f"/v1/jobs/{job_id}:pause").json()
    assert paused["version"] == 5


def test_the_version_does_not_move_when_the_job_is_dispatched(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job(name="steady")).json()["jobId"]
    etag = client.get(f"/v1/jobs/{job_id}").headers["etag"]
    # What the dispatcher's statement does to the job row when it materialises the next occurrence.
    query(
        api.database_url,
        "UPDATE jobs SET next_nominal_at = next_nominal_at + interval '1 hour', "
        "next_run_at = next_run_at + interval '1 hour', updated_at = now() WHERE job_id = %s",
        (job_id,),
    )
    assert client.get(f"/v1/jobs/{job_id}").headers["etag"] == etag
    updated = client.patch(f"/v1/jobs/{job_id}", json={"name": "still-mine"}, headers={"If-Match": etag})
    assert updated.status_code == 200, updated.text
