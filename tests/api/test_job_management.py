"""Managing jobs over real HTTP: truthful state, update, run now, backfill, labels, bounds, dry run.

No scheduler runs here: where a test needs an execution to exist or to end, it writes the row the
way the dispatcher or a worker would, and reads what the API answers.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx

from tests.api.conftest import ApiProcess, query
from tests.api.test_jobs_api import PROBLEM, once_job

UTC = timezone.utc


def z(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def cron_job(**overrides) -> dict:
    body = once_job(schedule={"cron": "0 * * * *", "tz": "UTC"})
    body.update(overrides)
    return body


def dispatched(api: ApiProcess, job_id: str, state: str, *, attempt: int = 1) -> None:
    """What the dispatcher leaves for a one-off (job completed, one execution) in ``state``."""
    query(
        api.database_url,
        "UPDATE jobs SET state = 'completed', next_nominal_at = NULL, next_run_at = NULL WHERE job_id = %s",
        (job_id,),
    )
    query(api.database_url, "DELETE FROM due_index WHERE job_id = %s", (job_id,))
    final = state not in ("ready", "leased")
    query(
        api.database_url,
        """
        INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                                lease_owner, lease_until, finished_at, error)
        SELECT job_id, tenant_id, queue, run_at, %s, max_attempts, %s, run_at,
               CASE WHEN %s = 'leased' THEN 'w' END, CASE WHEN %s = 'leased' THEN now() + interval '1 minute' END,
               CASE WHEN %s THEN now() END, CASE WHEN %s = 'dead' THEN 'HTTP 500' END
        FROM jobs WHERE job_id = %s""",
        (attempt, state, state, state, final, state, job_id),
    )


def test_a_one_off_reads_active_until_its_execution_is_final_and_failed_when_dead(
    api: ApiProcess, client: httpx.Client
) -> None:
    """A job whose only execution is dead (or still retrying) does not read `completed`."""
    job_id = client.post("/v1/jobs", json=once_job(name="truth")).json()["jobId"]
    dispatched(api, job_id, "ready")
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert (job["state"], job["lastOutcome"]) == ("active", None)
    assert job["executions"] == {"succeeded": 0, "dead": 0, "cancelled": 0, "skipped": 0, "pending": 1}
    query(
        api.database_url,
        "UPDATE executions SET state = 'dead', finished_at = now(), error = 'HTTP 500' WHERE job_id = %s",
        (job_id,),
    )
    job = client.get(f"/v1/jobs/{job_id}").json()
    assert (job["state"], job["lastOutcome"]) == ("failed", "dead") and job["lastFinishedAt"]
    assert job["executions"]["dead"] == 1 and job["executions"]["pending"] == 0
    failing = client.get("/v1/jobs", params={"state": "failed"}).json()["jobs"]
    assert job_id in [j["jobId"] for j in failing]
    assert job_id not in [j["jobId"] for j in client.get("/v1/jobs", params={"state": "completed"}).json()["jobs"]]
    query(api.database_url, "UPDATE executions SET state = 'succeeded', error = NULL WHERE job_id = %s", (job_id,))
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "completed"
    refused = client.get("/v1/jobs", params={"state": "done"})
    assert refused.status_code == 422 and "failed" in refused.json()["detail"]


def test_update_changes_the_job_and_moves_its_next_occurrence(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job(name="hourly")).json()["jobId"]
    before = client.get(f"/v1/jobs/{job_id}").json()
    resp = client.patch(
        f"/v1/jobs/{job_id}",
        json={
            "name": "every-quarter",
            "labels": {"team": "payments"},
            "schedule": {"cron": "*/15 * * * *"},
            "retry": {"maxAttempts": 2},
        },
    )
    assert resp.status_code == 200, resp.text
    job = resp.json()
    assert (job["name"], job["labels"], job["schedule"]["cron"], job["schedule"]["tz"]) == (
        "every-quarter",
        {"team": "payments"},
        "*/15 * * * *",
        "UTC",
    )
    assert job["retry"]["maxAttempts"] == 2 and job["retry"]["backoffSeconds"] == 10  # the rest kept
    assert job["version"] == before["version"] + 1
    next_run = datetime.fromisoformat(job["nextRunAt"])
    assert next_run.minute % 15 == 0 and next_run - datetime.now(UTC) <= timedelta(minutes=15)
    [(due_at,)] = query(api.database_url, "SELECT next_run_at FROM due_index WHERE job_id = %s", (job_id,))
    assert due_at == next_run
    # A stale If-Match, a bad value and another tenant change nothing.
    stale = client.patch(f"/v1/jobs/{job_id}", json={"name": "x"}, headers={"If-Match": str(before["version"])})
    assert stale.status_code == 412 and stale.headers["content-type"].startswith(PROBLEM)
    bad = client.patch(f"/v1/jobs/{job_id}", json={"schedule": {"cron": "61 * * * *"}})
    assert bad.status_code == 422
    assert client.patch(f"/v1/jobs/{job_id}", content=b"{nope").status_code == 400
    assert {**client.get(f"/v1/jobs/{job_id}").json(), "executions": None} == job
    # Removing a label with null (JSON Merge Patch); switching to a one-off drops the cron fields.
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    once = client.patch(f"/v1/jobs/{job_id}", json={"labels": {"team": None}, "schedule": {"runAt": z(at)}}).json()
    assert once["labels"] == {} and once["schedule"]["cron"] is None and once["nextRunAt"] == z(at)
    client.delete(f"/v1/jobs/{job_id}")
    assert client.patch(f"/v1/jobs/{job_id}", json={"name": "late"}).status_code == 409


def test_update_is_scoped_to_the_tenant(api: ApiProcess, client: httpx.Client, other_tenant) -> None:
    job_id = client.post("/v1/jobs", json=cron_job()).json()["jobId"]
    theirs = httpx.patch(f"{api.url}/v1/jobs/{job_id}", json={"name": "stolen"}, headers=other_tenant.headers)
    assert theirs.status_code == 404
    assert client.get(f"/v1/jobs/{job_id}").json()["name"] == "nightly-report"


def test_run_now_makes_one_manual_execution_subject_to_the_overlap_policy(
    api: ApiProcess, client: httpx.Client
) -> None:
    job_id = client.post("/v1/jobs", json=cron_job(concurrency="forbid")).json()["jobId"]
    first = client.post(f"/v1/jobs/{job_id}:run")
    assert first.status_code == 202, first.text
    execution_id = first.json()["executionId"]
    [(state, trigger)] = query(
        api.database_url, "SELECT state, trigger FROM executions WHERE execution_id = %s", (execution_id,)
    )
    assert (state, trigger) == ("ready", "manual")
    busy = client.post(f"/v1/jobs/{job_id}:run")
    assert busy.status_code == 409 and "forbid" in busy.json()["detail"]
    assert client.post(f"/v1/jobs/{job_id}:run", json={"overlap": "allow"}).status_code == 202
    replaced = client.post(f"/v1/jobs/{job_id}:run", json={"overlap": "replace"})
    assert replaced.status_code == 202
    states = dict(
        query(api.database_url, "SELECT state, count(*) FROM executions WHERE job_id = %s GROUP BY state", (job_id,))
    )
    assert states == {"cancelled": 2, "ready": 1}
    history = client.get(f"/v1/jobs/{job_id}/executions").json()
    assert {e["trigger"] for e in history} == {"manual"}
    assert client.post(f"/v1/jobs/{job_id}:run", json={"overlap": "sometimes"}).status_code == 422


def test_backfill_creates_the_past_occurrences_once_paced(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job()).json()["jobId"]
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    body = {"from": z(hour - timedelta(hours=5)), "to": z(hour - timedelta(minutes=1))}
    resp = client.post(f"/v1/jobs/{job_id}:backfill", json=body)
    assert resp.status_code == 202, resp.text
    assert resp.json() == {"created": 5, "existing": 0, "nextFrom": None}
    rows = query(
        api.database_url,
        "SELECT scheduled_for, ready_at, trigger FROM executions WHERE job_id = %s ORDER BY scheduled_for",
        (job_id,),
    )
    assert [r[0] for r in rows] == [hour - timedelta(hours=h) for h in (5, 4, 3, 2, 1)]
    assert {r[2] for r in rows} == {"backfill"}
    ready = [r[1] for r in rows]
    assert ready == sorted(ready) and ready[-1] > ready[0]  # paced, not all at once
    again = client.post(f"/v1/jobs/{job_id}:backfill", json=body).json()
    assert again == {"created": 0, "existing": 5, "nextFrom": None}
    future = client.post(f"/v1/jobs/{job_id}:backfill", json={"from": body["from"], "to": z(hour + timedelta(hours=3))})
    assert future.status_code == 422 and future.json()["field"] == "/to"
    assert client.post(f"/v1/jobs/{job_id}:backfill").status_code == 400  # no JSON body at all
    one_off = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    assert client.post(f"/v1/jobs/{one_off}:backfill", json=body).status_code == 422


def test_labels_and_name_prefix_filter_the_list(client: httpx.Client) -> None:
    ids = {}
    for name, labels in (
        ("pay-daily", {"team": "payments", "env": "prod"}),
        ("pay-weekly", {"team": "payments"}),
        ("ship-daily", {"team": "shipping", "env": "prod"}),
    ):
        resp = client.post("/v1/jobs", json=cron_job(name=name, labels=labels))
        assert resp.status_code == 201, resp.text
        ids[name] = resp.json()["jobId"]

    def names(**params) -> set[str]:
        return {j["name"] for j in client.get("/v1/jobs", params=params).json()["jobs"]} & set(ids)

    assert names(label="team:payments") == {"pay-daily", "pay-weekly"}
    assert names(label=["team:payments", "env:prod"]) == {"pay-daily"}
    assert names(namePrefix="pay-") == {"pay-daily", "pay-weekly"}
    assert names(namePrefix="ship", label="env:prod") == {"ship-daily"}
    assert client.get("/v1/jobs", params={"label": "team in payments"}).status_code == 422
    assert client.post("/v1/jobs", json=cron_job(labels={"Bad Key": "x"})).status_code == 422


def test_bounds_headers_and_retry_deadline_are_validated(client: httpx.Client) -> None:
    soon = datetime.now(UTC) + timedelta(days=2)
    start = client.post("/v1/jobs", json=cron_job(schedule={"cron": "0 9 * * *", "tz": "UTC", "startAt": z(soon)}))
    assert start.status_code == 201
    assert datetime.fromisoformat(start.json()["nextRunAt"]) >= soon
    cases = [
        (
            {"schedule": {"cron": "0 9 * * *", "tz": "UTC", "startAt": z(soon), "endAt": z(soon - timedelta(hours=1))}},
            "schedule.endAt",
        ),
        (
            {"schedule": {"cron": "0 9 1 1 *", "tz": "UTC", "endAt": z(datetime.now(UTC) + timedelta(hours=1))}},
            "schedule.endAt",
        ),
        (
            {"target": {"type": "http", "ref": "https://example.com/h", "headers": {"Kairos-Signature": "forged"}}},
            "target.headers.Kairos-Signature",
        ),
        ({"target": {"type": "http", "ref": "https://example.com/h", "method": "DELETE"}}, "target.method"),
        ({"target": {"type": "queue", "ref": "work", "method": "PUT"}}, "target"),
        ({"retry": {"maxRetryDurationSeconds": -1}}, "retry.maxRetryDurationSeconds"),
    ]
    for overrides, field in cases:
        resp = client.post("/v1/jobs", json=cron_job(**overrides))
        assert resp.status_code == 422, (overrides, resp.text)
        assert resp.json()["field"].replace("/", ".").strip(".") == field, resp.json()
    ok = client.post(
        "/v1/jobs",
        json=cron_job(
            target={"type": "http", "ref": "https://example.com/h", "method": "put", "headers": {"X-Team": "payments"}},
            retry={"maxRetryDurationSeconds": 600},
        ),
    )
    assert ok.status_code == 201, ok.text
    job = client.get(f"/v1/jobs/{ok.json()['jobId']}").json()
    assert job["target"] == {
        "type": "http",
        "ref": "https://example.com/h",
        "method": "PUT",
        "headers": {"X-Team": "payments"},
    }
    assert job["retry"]["maxRetryDurationSeconds"] == 600


def test_a_dry_run_job_runs_now_as_a_record_only(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job(dryRun=True)).json()["jobId"]
    assert client.get(f"/v1/jobs/{job_id}").json()["dryRun"] is True
    execution_id = client.post(f"/v1/jobs/{job_id}:run").json()["executionId"]
    [(state, reason)] = query(
        api.database_url, "SELECT state, skip_reason FROM executions WHERE execution_id = %s", (execution_id,)
    )
    assert (state, reason) == ("skipped", "dry_run")
    flipped = client.patch(f"/v1/jobs/{job_id}", json={"dryRun": False}).json()
    assert flipped["dryRun"] is False


def test_resume_with_skip_records_the_occurrences_the_pause_missed(api: ApiProcess, client: httpx.Client) -> None:
    """Resume's default (missed: skip) leaves a record of each occurrence it skipped."""
    job_id = client.post("/v1/jobs", json=cron_job(schedule={"cron": "* * * * *", "tz": "UTC"})).json()["jobId"]
    client.post(f"/v1/jobs/{job_id}:pause")
    query(
        api.database_url,
        "UPDATE jobs SET next_nominal_at = date_trunc('minute', now()) - interval '3 minutes' WHERE job_id = %s",
        (job_id,),
    )
    client.post(f"/v1/jobs/{job_id}:resume")
    history = client.get(f"/v1/jobs/{job_id}/executions").json()
    assert len(history) >= 3 and {(e["state"], e["skipReason"]) for e in history} == {("skipped", "paused")}


def test_an_every_schedule_is_anchored_and_updatable(api: ApiProcess, client: httpx.Client) -> None:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=1)
    resp = client.post("/v1/jobs", json=cron_job(schedule={"every": "1h30m", "startAt": z(start)}))
    assert resp.status_code == 201, resp.text
    job = client.get(f"/v1/jobs/{resp.json()['jobId']}").json()
    assert job["schedule"]["every"] == "1h30m" and job["schedule"]["anchorAt"] == z(start)
    assert job["nextRunAt"] == z(start)
    moved = client.patch(f"/v1/jobs/{job['jobId']}", json={"schedule": {"every": "15m"}}).json()
    assert moved["schedule"]["every"] == "15m" and moved["nextRunAt"] == z(start)  # same anchor, new step
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    past = client.post("/v1/jobs", json=cron_job(schedule={"every": "30m", "startAt": z(hour - timedelta(hours=2))}))
    first = datetime.fromisoformat(past.json()["nextRunAt"])
    assert first > datetime.now(UTC) and first.minute in (0, 30)  # the next point of the startAt grid
    filled = client.post(
        f"/v1/jobs/{past.json()['jobId']}:backfill", json={"from": z(hour - timedelta(hours=2)), "to": z(hour)}
    ).json()
    assert filled["created"] == 4
    for bad in ("5s", "15 minutes", "", "1x"):
        refused = client.post("/v1/jobs", json=cron_job(schedule={"every": bad}))
        assert refused.status_code == 422, bad
    both = client.post("/v1/jobs", json=cron_job(schedule={"every": "1h", "cron": "0 * * * *", "tz": "UTC"}))
    assert both.status_code == 422
    assert client.post("/v1/jobs", json=cron_job(schedule={"every": "1h", "tz": "UTC"})).status_code == 422


def test_a_patch_that_breaks_the_schema_names_the_field(client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job()).json()["jobId"]
    resp = client.patch(f"/v1/jobs/{job_id}", json={"retry": {"maxAttempts": "3"}})
    assert resp.status_code == 422 and resp.json()["field"] == "/retry/maxAttempts", resp.json()
    assert client.patch(f"/v1/jobs/{job_id}", json={"concurrency": "sometimes"}).json()["field"] == "/concurrency"
