"""GET /v1/schedules/preview evaluates an every schedule: given in the query, or an every job's own grid."""

from __future__ import annotations

import httpx

from tests.api.conftest import ApiProcess
from tests.api.test_job_management import cron_job


def preview(client: httpx.Client, **params: object) -> httpx.Response:
    return client.get("/v1/schedules/preview", params=params)


def test_an_every_schedule_in_the_query_lists_its_grid(api: ApiProcess, client: httpx.Client) -> None:
    answer = preview(client, every="15m", startAt="2030-01-01T00:00:00Z", count=3, **{"from": "2029-12-31T23:50:00Z"})
    assert answer.status_code == 200, answer.text
    out = answer.json()
    assert [t["utc"] for t in out["fireTimes"]] == [
        "2030-01-01T00:00:00Z",
        "2030-01-01T00:15:00Z",
        "2030-01-01T00:30:00Z",
    ]
    assert out["schedule"]["every"] == "15m" and out["schedule"]["anchorAt"] == "2030-01-01T00:00:00Z"
    later = preview(
        client, every="15m", startAt="2030-01-01T00:00:00Z", count=1, **{"from": "2030-01-01T00:20:00Z"}
    ).json()
    assert [t["utc"] for t in later["fireTimes"]] == ["2030-01-01T00:30:00Z"]


def test_an_every_job_is_previewed_on_its_own_grid(api: ApiProcess, client: httpx.Client) -> None:
    job = client.post("/v1/jobs", json=cron_job(schedule={"every": "1h", "startAt": "2030-01-01T00:00:00Z"})).json()
    out = preview(client, jobId=job["jobId"], count=2, **{"from": "2030-01-01T01:30:00Z"})
    assert out.status_code == 200, out.text
    assert [t["utc"] for t in out.json()["fireTimes"]] == ["2030-01-01T02:00:00Z", "2030-01-01T03:00:00Z"]


def test_every_with_cron_or_zone_fields_is_refused_naming_the_parameter(api: ApiProcess, client: httpx.Client) -> None:
    both = preview(client, every="15m", cron="0 * * * *", tz="UTC")
    assert both.status_code == 422 and both.json()["field"] == "every"
    zoned = preview(client, every="15m", tz="UTC")
    assert zoned.status_code == 422 and zoned.json()["field"] == "tz"
    bad = preview(client, every="soon")
    assert bad.status_code == 422 and bad.json()["field"] == "every"
