"""Over HTTP: every with a tz (submit, GET, PATCH, preview and backfill agree on the wall-clock grid) and
overlap buffer_one (accepted, shown, refused where it cannot apply)."""

from __future__ import annotations

import httpx

from tests.api.conftest import ApiProcess, query
from tests.api.test_job_management import cron_job

LONDON_DAILY = {"every": "1d", "tz": "Europe/London", "startAt": "2026-03-27T09:00:00Z"}
# 09:00 in London each day: GMT until the 29th of March 2026, then BST.
WALL_CLOCK = ["2026-03-28T09:00:00Z", "2026-03-29T08:00:00Z", "2026-03-30T08:00:00Z"]


def test_a_zoned_every_job_is_stored_shown_and_previewed_on_its_wall_clock(
    api: ApiProcess, client: httpx.Client
) -> None:
    made = client.post("/v1/jobs", json=cron_job(schedule=LONDON_DAILY))
    assert made.status_code == 201, made.text
    job_id = made.json()["jobId"]
    schedule = client.get(f"/v1/jobs/{job_id}").json()["schedule"]
    assert (schedule["every"], schedule["tz"]) == ("1d", "Europe/London")
    assert schedule["dst"] == {"gap": "shift", "repeat": "once"}
    by_job = client.get(
        "/v1/schedules/preview", params={"jobId": job_id, "count": 3, "from": "2026-03-27T09:00:00Z"}
    ).json()
    assert [t["utc"] for t in by_job["fireTimes"]] == WALL_CLOCK
    assert {t["local"][11:19] for t in by_job["fireTimes"]} == {"09:00:00"}
    by_query = client.get(
        "/v1/schedules/preview",
        params={
            "every": "1d",
            "tz": "Europe/London",
            "startAt": "2026-03-27T09:00:00Z",
            "count": 3,
            "from": "2026-03-27T09:00:00Z",
        },
    )
    assert by_query.status_code == 200, by_query.text
    assert [t["utc"] for t in by_query.json()["fireTimes"]] == WALL_CLOCK
    assert by_query.json()["schedule"]["tz"] == "Europe/London"
    # A backfill creates the same occurrences the scheduler would have.
    filled = client.post(
        f"/v1/jobs/{job_id}:backfill", json={"from": "2026-03-28T00:00:00Z", "to": "2026-03-31T00:00:00Z"}
    )
    assert filled.status_code == 202 and filled.json()["created"] == 3, filled.text
    listed = client.get(f"/v1/jobs/{job_id}/executions").json()
    assert sorted(e["scheduledFor"] for e in listed) == WALL_CLOCK
    # A PATCH of the interval keeps the zone; one to a cron schedule drops it with the every.
    patched = client.patch(f"/v1/jobs/{job_id}", json={"schedule": {"every": "7d"}})
    assert patched.status_code == 200, patched.text
    assert (patched.json()["schedule"]["every"], patched.json()["schedule"]["tz"]) == ("7d", "Europe/London")
    # Without its zone a day is 24 hours again, and the zone's DST rules go with it.
    unzoned = client.patch(f"/v1/jobs/{job_id}", json={"schedule": {"tz": None}})
    assert unzoned.status_code == 200, unzoned.text
    assert unzoned.json()["schedule"].get("tz") is None and unzoned.json()["schedule"].get("dst") is None
    client.patch(f"/v1/jobs/{job_id}", json={"schedule": {"tz": "Europe/London"}})
    to_cron = client.patch(f"/v1/jobs/{job_id}", json={"schedule": {"cron": "0 9 * * *", "tz": "Europe/Paris"}})
    assert to_cron.status_code == 200, to_cron.text
    assert to_cron.json()["schedule"].get("every") is None and to_cron.json()["schedule"]["tz"] == "Europe/Paris"


def test_a_zone_is_refused_for_an_interval_that_is_not_whole_days(api: ApiProcess, client: httpx.Client) -> None:
    hourly = client.post("/v1/jobs", json=cron_job(schedule={"every": "6h", "tz": "Europe/London"}))
    assert hourly.status_code == 422 and hourly.json()["field"] == "/schedule/tz", hourly.text
    assert "whole days" in hourly.json()["detail"]
    no_zone = client.post("/v1/jobs", json=cron_job(schedule={"every": "1d", "dst": {"gap": "skip"}}))
    assert no_zone.status_code == 422 and no_zone.json()["field"] == "/schedule/dst", no_zone.text
    preview = client.get("/v1/schedules/preview", params={"every": "6h", "tz": "Europe/London"})
    assert preview.status_code == 422 and preview.json()["field"] == "tz"


def test_buffer_one_is_an_overlap_policy_a_job_can_have(api: ApiProcess, client: httpx.Client) -> None:
    made = client.post("/v1/jobs", json=cron_job(concurrency="buffer_one"))
    assert made.status_code == 201, made.text
    job_id = made.json()["jobId"]
    shown = client.get(f"/v1/jobs/{job_id}")
    assert shown.status_code == 200 and shown.json()["concurrency"] == "buffer_one", shown.text
    assert shown.json()["bufferedAt"] is None
    # What dispatch writes when an occurrence falls due while the previous execution runs.
    query(api.database_url, "UPDATE jobs SET buffered_at = '2030-01-01T09:00:00Z' WHERE job_id = %s", (job_id,))
    assert client.get(f"/v1/jobs/{job_id}").json()["bufferedAt"] == "2030-01-01T09:00:00Z"
    back = client.patch(f"/v1/jobs/{job_id}", json={"concurrency": "forbid"})
    assert back.status_code == 200 and back.json()["concurrency"] == "forbid"
    wrong = client.post("/v1/jobs", json=cron_job(concurrency="buffer_two"))
    assert wrong.status_code == 422 and wrong.json()["field"] == "/concurrency"


def test_the_openapi_document_describes_buffer_one_and_a_zoned_every(api: ApiProcess) -> None:
    schemas = httpx.get(f"{api.url}/schema/openapi.json", timeout=10).json()["components"]["schemas"]
    concurrency = schemas["JobIn"]["properties"]["concurrency"]
    assert "buffer_one" in str(concurrency) and "buffer_one" in concurrency["description"]
    assert "settles" in schemas["JobOut"]["properties"]["bufferedAt"]["description"]
    tz = schemas["ScheduleIn"]["properties"]["tz"]["description"]
    assert "every" in tz and "whole days" in tz
    assert "wall-clock" in schemas["ScheduleIn"]["properties"]["every"]["description"]


def test_a_pause_drops_the_waiting_occurrence_at_once_and_a_resume_never_brings_it_back(
    api: ApiProcess, client: httpx.Client
) -> None:
    """The scheduler's BufferStarter drops a paused job's waiting occurrence within its second; the API's own
    pause and resume drop it in their transaction, so a pause and a resume within that second cannot leave
    it to start after all."""
    for action in ("pause", "resume"):
        made = client.post("/v1/jobs", json=cron_job(concurrency="buffer_one"))
        job_id = made.json()["jobId"]
        if action == "resume":  # paused by pauseOnFailure, before the BufferStarter's next pass
            assert client.post(f"/v1/jobs/{job_id}:pause", json={}).status_code == 200
        query(api.database_url, "UPDATE jobs SET buffered_at = '2030-01-01T09:00:00Z' WHERE job_id = %s", (job_id,))
        done = client.post(f"/v1/jobs/{job_id}:{action}", json={})
        assert done.status_code == 200, done.text
        assert done.json()["bufferedAt"] is None
        history = client.get(f"/v1/jobs/{job_id}/executions").json()
        dropped = [e for e in history if e["scheduledFor"] == "2030-01-01T09:00:00Z"]
        assert [(e["state"], e["skipReason"]) for e in dropped] == [("skipped", "paused")], history
