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
