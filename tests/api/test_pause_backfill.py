"""Pausing a job does not take back the executions a backfill created, nor make resume skip the past."""

from __future__ import annotations

import httpx

from tests.api.conftest import ApiProcess, query
from tests.api.test_job_management import cron_job


def test_pause_and_resume_leave_a_paced_backfill_alone(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job(schedule={"cron": "30 8 * * MON-FRI", "tz": "UTC"})).json()["jobId"]
    filled = client.post(
        f"/v1/jobs/{job_id}:backfill", json={"from": "2026-11-02T00:00:00Z", "to": "2026-11-07T00:00:00Z"}
    ).json()
    assert filled["created"] == 5
    assert client.post(f"/v1/jobs/{job_id}:pause").status_code == 200
    assert client.post(f"/v1/jobs/{job_id}:resume", json={"missed": "skip"}).status_code == 200
    rows = query(
        api.database_url,
        "SELECT scheduled_for, state, trigger FROM executions WHERE job_id = %s ORDER BY scheduled_for",
        (job_id,),
    )
    assert [(r[0].day, r[2]) for r in rows] == [(d, "backfill") for d in (2, 3, 4, 5, 6)], rows
    assert all(r[1] == "ready" for r in rows), rows
