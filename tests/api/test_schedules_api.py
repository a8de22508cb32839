"""Schedules over real HTTP: zones a new job may name, the resolved expression, the preview."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.api.test_jobs_api import PROBLEM, once_job


@pytest.mark.parametrize(("tz", "suggested"), [("EST", "America/New_York"), ("EST5EDT", "America/New_York"),
                                               ("PST8PDT", "America/Los_Angeles"), ("Etc/GMT+5", "UTC-05:00")])
def test_a_legacy_zone_name_is_refused_naming_the_zone_to_use(
        api: ApiProcess, client: httpx.Client, tenant: TenantKey, tz: str, suggested: str) -> None:
    resp = client.post("/v1/jobs", json=once_job(schedule={"cron": "0 9 * * *", "tz": tz}))
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    assert resp.json()["field"] == "schedule.tz"
    assert suggested in resp.json()["detail"]
    assert query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,))[0][0] == 0
    for valid in ("UTC", "Etc/UTC", "America/New_York"):
        ok = client.post("/v1/jobs", json=once_job(schedule={"cron": "0 9 * * *", "tz": valid}))
        assert ok.status_code == 201, ok.text


def test_a_job_shows_its_h_expression_as_submitted_and_as_resolved(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=once_job(schedule={"cron": "H 9 * * *", "tz": "UTC"})).json()["jobId"]
    [(stored,)] = query(api.database_url, "SELECT cron_resolved FROM jobs WHERE job_id = %s", (job_id,))
    minute, rest = stored.split(" ", 1)
    assert rest == "9 * * *" and 0 <= int(minute) <= 59
    schedule = client.get(f"/v1/jobs/{job_id}").json()["schedule"]
    assert (schedule["cron"], schedule["cronResolved"]) == ("H 9 * * *", stored)
    [listed] = client.get("/v1/jobs").json()["jobs"]
    assert listed["schedule"]["cronResolved"] == stored
    once = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    assert client.get(f"/v1/jobs/{once}").json()["schedule"]["cronResolved"] is None
