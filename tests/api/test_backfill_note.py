"""A backfill that finds no occurrence in its range says why, instead of a bare "0 created"."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx

from tests.api.conftest import ApiProcess
from tests.api.test_job_management import cron_job, z


def test_a_backfill_before_an_every_jobs_anchor_says_where_its_grid_starts(
    api: ApiProcess, client: httpx.Client
) -> None:
    job = client.post("/v1/jobs", json=cron_job(schedule={"every": "1h"})).json()
    anchor = client.get(f"/v1/jobs/{job['jobId']}").json()["schedule"]["anchorAt"]
    now = datetime.now(timezone.utc).replace(microsecond=0)
    filled = client.post(
        f"/v1/jobs/{job['jobId']}:backfill",
        json={"from": z(now - timedelta(days=1)), "to": z(now - timedelta(hours=1))},
    )
    assert filled.status_code == 202, filled.text
    out = filled.json()
    assert (out["created"], out["existing"]) == (0, 0)
    assert anchor.removesuffix("Z") in out["note"].replace("+00:00", "") and "anchor" in out["note"], out


def test_a_backfill_that_finds_occurrences_has_no_note(api: ApiProcess, client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json=cron_job()).json()
    now = datetime.now(timezone.utc).replace(microsecond=0, second=0, minute=0)
    out = client.post(
        f"/v1/jobs/{job['jobId']}:backfill",
        json={"from": z(now - timedelta(hours=3)), "to": z(now - timedelta(hours=1))},
    ).json()
    assert out["created"] == 2 and out.get("note") is None, out
