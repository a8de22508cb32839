"""Schedules over real HTTP: zones a new job may name, the resolved expression, the preview."""

from __future__ import annotations

from datetime import datetime, timedelta

import httpx
import pytest

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.api.test_jobs_api import PROBLEM, once_job


@pytest.mark.parametrize(
    ("tz", "suggested"),
    [
        ("EST", "America/New_York"),
        ("EST5EDT", "America/New_York"),
        ("PST8PDT", "America/Los_Angeles"),
        ("Etc/GMT+5", "UTC-05:00"),
    ],
)
def test_a_legacy_zone_name_is_refused_naming_the_zone_to_use(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, tz: str, suggested: str
) -> None:
    resp = client.post("/v1/jobs", json=once_job(schedule={"cron": "0 9 * * *", "tz": tz}))
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    assert resp.json()["field"] == "/schedule/tz"
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


def preview(client: httpx.Client, **params: object) -> httpx.Response:
    return client.get("/v1/schedules/preview", params=params)


def test_the_preview_applies_the_dst_gap_and_repeat_policies(client: httpx.Client) -> None:
    spring = {"cron": "30 2 * * *", "tz": "America/New_York", "count": 3, "from": "2026-03-06T12:00:00Z"}
    skipped = preview(client, **spring, gap="skip").json()["fireTimes"]
    assert [t["skipped"] for t in skipped] == [False, True, False]
    assert "skipped" in skipped[1]["dstNote"]
    shifted = preview(client, **spring).json()["fireTimes"]
    assert [t["skipped"] for t in shifted] == [False, False, False] and "moved to 03:00" in shifted[1]["dstNote"]

    fall = {"cron": "30 1 * * *", "tz": "America/New_York", "count": 3, "from": "2026-10-31T12:00:00Z"}
    twice = preview(client, **fall, repeat="twice").json()
    assert [t["utc"][:16] for t in twice["fireTimes"]] == ["2026-11-01T05:30", "2026-11-01T06:30", "2026-11-02T06:30"]
    assert twice["schedule"]["dst"] == {"gap": "shift", "repeat": "twice"}
    once = preview(client, **fall).json()["fireTimes"]
    assert [t["utc"][:16] for t in once] == ["2026-11-01T05:30", "2026-11-02T06:30", "2026-11-03T06:30"]


def test_fall_back_repeats_of_a_wildcard_hour_get_a_note(client: httpx.Client) -> None:
    times = preview(
        client, cron="*/15 * * * *", tz="America/New_York", count=10, **{"from": "2026-11-01T04:40:00Z"}
    ).json()["fireTimes"]
    repeated = [(t["local"][11:16], t["dstNote"]) for t in times if t["dstNote"]]
    assert [local for local, _ in repeated] == ["01:00", "01:15", "01:30", "01:45", "01:00", "01:15", "01:30", "01:45"]
    assert all("occurs twice on 2026-11-01 (fall back)" in note for _, note in repeated)
    assert times[0]["dstNote"] is None and times[-1]["dstNote"] is None  # 00:xx EDT and 02:00 EST


def test_the_preview_adds_the_jitter_offset(client: httpx.Client) -> None:
    body = preview(
        client, cron="0 9 * * *", tz="UTC", count=2, jitterSeconds=600, **{"from": "2026-06-01T00:00:00Z"}
    ).json()
    offset = body["jitterOffsetSeconds"]
    assert 0 <= offset < 600 and body["schedule"]["jitterSeconds"] == 600
    for fire in body["fireTimes"]:
        nominal, runs = datetime.fromisoformat(fire["nominalUtc"]), datetime.fromisoformat(fire["utc"])
        assert runs - nominal == timedelta(seconds=offset) and nominal.hour == 9 and nominal.minute == 0


def test_the_preview_of_a_job_uses_its_stored_schedule_and_its_own_jitter(
    api: ApiProcess, client: httpx.Client, other_tenant: TenantKey
) -> None:
    created = client.post(
        "/v1/jobs",
        json=once_job(
            schedule={"cron": "H H * * *", "tz": "Europe/London", "jitterSeconds": 3600, "dst": {"gap": "skip"}}
        ),
    ).json()
    body = preview(client, jobId=created["jobId"], count=3).json()
    first = body["fireTimes"][0]
    # The first fire time is the job's own next run: its H slot and its jitter offset.
    assert datetime.fromisoformat(first["utc"]) == datetime.fromisoformat(created["nextRunAt"])
    [(resolved,)] = query(api.database_url, "SELECT cron_resolved FROM jobs WHERE job_id = %s", (created["jobId"],))
    assert body["schedule"]["cron"] == "H H * * *" and body["schedule"]["cronResolved"] == resolved
    assert body["schedule"]["tz"] == "Europe/London" and body["schedule"]["dst"]["gap"] == "skip"
    assert body["jobId"] == created["jobId"]
    # A query value replaces the job's, keyed by the job all the same.
    moved = preview(client, jobId=created["jobId"], count=1, tz="Asia/Tokyo").json()
    assert moved["schedule"]["tz"] == "Asia/Tokyo" and moved["jitterOffsetSeconds"] == body["jitterOffsetSeconds"]
    # Another tenant's job is not found, and a one-off job has nothing to preview.
    with httpx.Client(base_url=api.url, headers=other_tenant.headers) as other:
        assert preview(other, jobId=created["jobId"]).status_code == 404
    one_off = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    refused = preview(client, jobId=one_off)
    assert refused.status_code == 422 and refused.json()["field"] == "jobId"


def test_preview_problems_name_the_query_parameter(client: httpx.Client) -> None:
    for params, field in (
        ({"tz": "UTC"}, "cron"),
        ({"cron": "* * * * *"}, "tz"),
        ({"cron": "* * * * *", "tz": "UTC", "gap": "later"}, "gap"),
        ({"cron": "* * * * *", "tz": "UTC", "repeat": "thrice"}, "repeat"),
        ({"cron": "* * * * *", "tz": "UTC", "jitterSeconds": -1}, "jitterSeconds"),
        ({"cron": "* * * * *", "tz": "EST"}, "tz"),
        ({"jobId": "nope"}, "jobId"),
    ):
        resp = preview(client, **params)
        assert resp.status_code == 422, (params, resp.text)
        assert resp.json()["field"] == field, (params, resp.json())
