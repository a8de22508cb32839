"""A PATCH of an `every` job keeps its grid without writing a startAt the tenant never set."""

from __future__ import annotations

import httpx

from tests.api.conftest import ApiProcess
from tests.api.test_job_management import cron_job


def test_patching_an_every_job_keeps_its_anchor_and_invents_no_start_at(api: ApiProcess, client: httpx.Client) -> None:
    made = client.post("/v1/jobs", json=cron_job(schedule={"every": "1h"}))
    assert made.status_code == 201, made.text
    job = client.get(f"/v1/jobs/{made.json()['jobId']}").json()
    assert job["schedule"]["startAt"] is None and job["schedule"]["anchorAt"]

    renamed = client.patch(f"/v1/jobs/{job['jobId']}", json={"name": "renamed"}).json()
    assert renamed["schedule"]["startAt"] is None, renamed["schedule"]
    assert renamed["schedule"]["anchorAt"] == job["schedule"]["anchorAt"]
    assert renamed["nextRunAt"] == job["nextRunAt"]

    stepped = client.patch(f"/v1/jobs/{job['jobId']}", json={"schedule": {"every": "30m"}}).json()
    assert stepped["schedule"]["startAt"] is None and stepped["schedule"]["every"] == "30m"
    assert stepped["schedule"]["anchorAt"] == job["schedule"]["anchorAt"]
