"""The job API over real HTTP against a `kairos api` process."""

from __future__ import annotations

import concurrent.futures
from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.api.conftest import ApiProcess, TenantKey, query

PROBLEM = "application/problem+json"


def once_job(**overrides) -> dict:
    at = (datetime.now(timezone.utc) + timedelta(hours=1)).replace(microsecond=0)
    body = {
        "name": "nightly-report",
        "target": {"type": "http", "ref": "https://example.com/hook"},
        "payload": {"report": "sales"},
        "schedule": {"runAt": at.isoformat().replace("+00:00", "Z")},
        "retry": {"maxAttempts": 5, "backoffSeconds": 10},
        "timeoutSeconds": 300,
    }
    body.update(overrides)
    return body


def test_every_v1_route_requires_a_valid_key(api: ApiProcess) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic abc"}):
        resp = httpx.get(f"{api.url}/v1/jobs", headers=headers)
        assert resp.status_code == 401
        assert resp.headers["content-type"].startswith(PROBLEM)
        assert resp.json()["status"] == 401
    assert httpx.post(f"{api.url}/v1/jobs", json=once_job()).status_code == 401


def test_create_then_get_one_off_job_writes_job_and_due_row(api: ApiProcess, client: httpx.Client) -> None:
    body = once_job()
    resp = client.post("/v1/jobs", json=body)
    assert resp.status_code == 201, resp.text
    created = resp.json()
    assert set(created) == {"jobId", "nextRunAt"}
    assert datetime.fromisoformat(created["nextRunAt"]) == datetime.fromisoformat(body["schedule"]["runAt"])
    job = client.get(f"/v1/jobs/{created['jobId']}").json()
    assert job["state"] == "active" and job["name"] == "nightly-report"
    assert job["target"] == {"type": "http", "ref": "https://example.com/hook", "method": "POST", "headers": {}}
    assert job["payload"] == {"report": "sales"}
    rows = query(
        api.database_url, "SELECT next_run_at, due_minute FROM due_index WHERE job_id = %s", (created["jobId"],)
    )
    assert len(rows) == 1
    assert rows[0][0] == datetime.fromisoformat(body["schedule"]["runAt"])
    assert rows[0][1] == rows[0][0].replace(second=0)


def test_delay_seconds_and_cron_jobs_compute_next_run(client: httpx.Client) -> None:
    before = datetime.now(timezone.utc)
    resp = client.post("/v1/jobs", json=once_job(schedule={"delaySeconds": 90}))
    assert resp.status_code == 201
    next_run = datetime.fromisoformat(resp.json()["nextRunAt"])
    assert before + timedelta(seconds=89) <= next_run <= datetime.now(timezone.utc) + timedelta(seconds=91)

    resp = client.post("/v1/jobs", json=once_job(schedule={"cron": "0 9 * * MON-FRI", "tz": "Europe/London"}))
    assert resp.status_code == 201, resp.text
    nxt = datetime.fromisoformat(resp.json()["nextRunAt"])
    from zoneinfo import ZoneInfo

    local = nxt.astimezone(ZoneInfo("Europe/London"))
    assert (local.hour, local.minute, local.second) == (9, 0, 0) and local.weekday() < 5
    assert nxt > before


def test_idempotency_key_replays_same_body_and_rejects_different_body(client: httpx.Client) -> None:
    body = once_job()
    first = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "abc-1"})
    again = client.post("/v1/jobs", json=body, headers={"Idempotency-Key": "abc-1"})
    assert first.status_code == again.status_code == 201
    assert first.json() == again.json()
    other = client.post("/v1/jobs", json=once_job(name="different"), headers={"Idempotency-Key": "abc-1"})
    assert other.status_code == 409
    assert other.headers["content-type"].startswith(PROBLEM)
    names = [j["name"] for j in client.get("/v1/jobs").json()["jobs"]]
    assert names.count("nightly-report") == 1 and "different" not in names


def test_fifty_concurrent_retries_with_one_key_create_exactly_one_job(api: ApiProcess, tenant: TenantKey) -> None:
    body = once_job(name="concurrent")

    def submit(_: int) -> tuple[int, str]:
        with httpx.Client(base_url=api.url, headers={**tenant.headers, "Idempotency-Key": "same-key"}, timeout=30) as c:
            r = c.post("/v1/jobs", json=body)
            return r.status_code, r.json().get("jobId", r.text)

    with concurrent.futures.ThreadPoolExecutor(max_workers=50) as pool:
        results = list(pool.map(submit, range(50)))
    assert {status for status, _ in results} == {201}
    assert len({job_id for _, job_id in results}) == 1
    rows = query(
        api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s AND name = 'concurrent'", (tenant.tenant_id,)
    )
    assert rows[0][0] == 1
    due = query(api.database_url, "SELECT count(*) FROM due_index WHERE tenant_id = %s", (tenant.tenant_id,))
    assert due[0][0] == 1


BAD_BODIES = [
    ("name", {"name": ""}),
    ("target.type", {"target": {"type": "ftp", "ref": "x"}}),
    ("target.ref", {"target": {"type": "http", "ref": "not a url"}}),
    ("target.ref", {"target": {"type": "http", "ref": "file:///etc/passwd"}}),
    ("target.ref", {"target": {"type": "queue", "ref": "bad pool name!"}}),
    ("payload", {"payload": {"blob": "x" * (4 * 1024 * 1024)}}),  # over KAIROS_PAYLOAD_MAX_BYTES
    ("schedule", {"schedule": {}}),
    ("schedule", {"schedule": {"delaySeconds": 5, "cron": "* * * * *", "tz": "UTC"}}),
    ("schedule.runAt", {"schedule": {"runAt": "2026-10-16T09:00:00"}}),
    ("schedule.runAt", {"schedule": {"runAt": "tomorrow"}}),
    ("schedule.runAt", {"schedule": {"runAt": "2999-01-01T00:00:00Z"}}),
    ("schedule.runAt", {"schedule": {"runAt": "2001-01-01T00:00:00Z"}}),
    ("schedule.delaySeconds", {"schedule": {"delaySeconds": -1}}),
    ("schedule.cron", {"schedule": {"cron": "61 * * * *", "tz": "UTC"}}),
    ("schedule.cron", {"schedule": {"cron": "* * * *", "tz": "UTC"}}),
    ("schedule.cron", {"schedule": {"cron": "0 0 30 2 *", "tz": "UTC"}}),
    ("schedule.tz", {"schedule": {"cron": "0 9 * * *", "tz": "Mars/Olympus"}}),
    ("schedule.tz", {"schedule": {"cron": "0 9 * * *"}}),
    ("schedule.jitterSeconds", {"schedule": {"cron": "0 9 * * *", "tz": "UTC", "jitterSeconds": -5}}),
    ("schedule.dst.gap", {"schedule": {"cron": "0 9 * * *", "tz": "UTC", "dst": {"gap": "later"}}}),
    ("retry.maxAttempts", {"retry": {"maxAttempts": 0}}),
    ("retry.backoffSeconds", {"retry": {"backoffSeconds": -1}}),
    ("retry.maxBackoffSeconds", {"retry": {"backoffSeconds": 60, "maxBackoffSeconds": 10}}),
    ("timeoutSeconds", {"timeoutSeconds": 0}),
    ("timeoutSeconds", {"timeoutSeconds": 10**7}),
]


@pytest.mark.parametrize(("field", "override"), BAD_BODIES, ids=[f"{f}-{i}" for i, (f, _) in enumerate(BAD_BODIES)])
def test_bad_input_gets_a_problem_naming_the_field_and_writes_nothing(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, field: str, override: dict
) -> None:
    resp = client.post("/v1/jobs", json=once_job(**override))
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM)
    problem = resp.json()
    assert problem["status"] == resp.status_code and problem["detail"] and problem["title"]
    assert problem["field"] == "/" + field.replace(".", "/"), problem  # a JSON Pointer into the body
    assert query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,))[0][0] == 0


def test_a_body_that_is_not_json_gets_400_and_one_that_breaks_the_schema_422(client: httpx.Client) -> None:
    resp = client.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"})
    assert resp.status_code == 400 and resp.headers["content-type"].startswith(PROBLEM)
    resp = client.post("/v1/jobs", json=once_job(retry={"maxAttempts": "many"}))
    assert resp.status_code == 422 and resp.json()["field"] == "/retry/maxAttempts"
    resp = client.post("/v1/jobs", json=once_job(surprise=1))
    assert resp.status_code == 422 and resp.json()["field"] == "/surprise"


def test_tenants_only_see_their_own_jobs(api: ApiProcess, client: httpx.Client, other_tenant: TenantKey) -> None:
    job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    with httpx.Client(base_url=api.url, headers=other_tenant.headers) as other:
        unknown = other.get("/v1/jobs/00000000-0000-4000-8000-000000000000")
        foreign = other.get(f"/v1/jobs/{job_id}")
        assert foreign.status_code == unknown.status_code == 404
        assert foreign.json()["detail"] == unknown.json()["detail"]
        assert other.delete(f"/v1/jobs/{job_id}").status_code == 404
        assert other.post(f"/v1/jobs/{job_id}:pause").status_code == 404
        assert other.get(f"/v1/jobs/{job_id}/executions").status_code == 404
        assert other.get("/v1/jobs").json()["jobs"] == []
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "active"


def test_list_filters_and_paginates(client: httpx.Client) -> None:
    ids = [client.post("/v1/jobs", json=once_job(name=f"job-{i % 2}")).json()["jobId"] for i in range(7)]
    client.post(f"/v1/jobs/{ids[0]}:pause")
    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        resp = client.get("/v1/jobs", params=params)
        assert resp.status_code == 200, resp.text
        page = resp.json()
        seen += [j["jobId"] for j in page["jobs"]]
        pages += 1
        cursor = page["nextCursor"]
        if not cursor:
            assert "link" not in resp.headers
            break
        assert 'rel="next"' in resp.headers["link"]
    assert pages == 3 and sorted(seen) == sorted(ids) and len(seen) == 7
    assert seen == list(reversed(ids))  # newest first
    assert [j["jobId"] for j in client.get("/v1/jobs", params={"state": "paused"}).json()["jobs"]] == [ids[0]]
    named = client.get("/v1/jobs", params={"name": "job-1"}).json()["jobs"]
    assert len(named) == 3 and {j["name"] for j in named} == {"job-1"}
    assert client.get("/v1/jobs", params={"state": "sleeping"}).status_code == 422
    assert client.get("/v1/jobs", params={"cursor": "garbage"}).status_code == 422


def test_pause_resume_and_cancel(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=once_job(schedule={"cron": "*/5 * * * *", "tz": "UTC"})).json()["jobId"]
    due = "SELECT count(*) FROM due_index WHERE job_id = %s"
    paused = client.post(f"/v1/jobs/{job_id}:pause")
    assert paused.status_code == 200 and paused.json()["state"] == "paused"
    assert paused.json()["nextRunAt"] is None
    assert query(api.database_url, due, (job_id,))[0][0] == 0
    assert client.post(f"/v1/jobs/{job_id}:pause").status_code == 200  # idempotent
    resumed = client.post(f"/v1/jobs/{job_id}:resume")
    assert resumed.status_code == 200 and resumed.json()["state"] == "active"
    nxt = datetime.fromisoformat(resumed.json()["nextRunAt"])
    assert nxt > datetime.now(timezone.utc) and nxt.minute % 5 == 0
    assert query(api.database_url, due, (job_id,))[0][0] == 1
    assert client.post(f"/v1/jobs/{job_id}:explode").status_code == 422
    assert client.post(f"/v1/jobs/{job_id}:resume", json={"missed": "sometimes"}).status_code == 422

    # A ready (not yet started) execution is cancelled with the job; a leased one is left to finish.
    query(
        api.database_url,
        """
        INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at)
        SELECT job_id, tenant_id, queue, now() - interval '1 minute', 3, 'ready', now() FROM jobs WHERE job_id = %s""",
        (job_id,),
    )
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "cancelled"
    assert query(api.database_url, due, (job_id,))[0][0] == 0
    states = query(api.database_url, "SELECT state FROM executions WHERE job_id = %s", (job_id,))
    assert states == [("cancelled",)]
    assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
    assert client.post(f"/v1/jobs/{job_id}:resume").status_code == 409


def test_resume_with_run_once_runs_the_newest_missed_occurrence_now(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=once_job(schedule={"cron": "* * * * *", "tz": "UTC"})).json()["jobId"]
    client.post(f"/v1/jobs/{job_id}:pause")
    # Pretend the pause began 10 minutes ago: the occurrences since then were missed.
    query(
        api.database_url,
        "UPDATE jobs SET next_nominal_at = date_trunc('minute', now()) - interval '10 minutes',"
        " paused_at = now() - interval '10 minutes' WHERE job_id = %s",
        (job_id,),
    )
    before = datetime.now(timezone.utc)
    resumed = client.post(f"/v1/jobs/{job_id}:resume", json={"missed": "run_once"}).json()
    run_at = datetime.fromisoformat(resumed["nextRunAt"])
    assert before - timedelta(seconds=1) <= run_at <= datetime.now(timezone.utc) + timedelta(seconds=1)
    nominal = query(api.database_url, "SELECT nominal_at FROM due_index WHERE job_id = %s", (job_id,))[0][0]
    assert nominal == before.replace(second=0, microsecond=0) or nominal == run_at.replace(second=0, microsecond=0)


def test_one_off_job_resumed_after_its_time_skips_or_runs_once(api: ApiProcess, client: httpx.Client) -> None:
    for missed, state in (("skip", "completed"), ("run_once", "active")):
        job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
        client.post(f"/v1/jobs/{job_id}:pause")
        query(
            api.database_url,
            "UPDATE jobs SET run_at = now() - interval '5 minutes',"
            " next_nominal_at = now() - interval '5 minutes' WHERE job_id = %s",
            (job_id,),
        )
        assert client.post(f"/v1/jobs/{job_id}:resume", json={"missed": missed}).json()["state"] == state
    history = client.get(f"/v1/jobs/{job_id}/executions").json()
    assert history == []


def test_execution_history_newest_first_with_link_pagination(api: ApiProcess, client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=once_job(schedule={"cron": "* * * * *", "tz": "UTC"})).json()["jobId"]
    query(
        api.database_url,
        """
        INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                                started_at, finished_at, error)
        SELECT job_id, tenant_id, queue, now() - make_interval(mins => g), 1, 3,
               CASE WHEN g %% 2 = 0 THEN 'succeeded' ELSE 'dead' END, now(), now(), now(),
               CASE WHEN g %% 2 = 0 THEN NULL ELSE 'HTTP 500' END
        FROM jobs, generate_series(1, 5) AS g WHERE job_id = %s""",
        (job_id,),
    )
    first = client.get(f"/v1/jobs/{job_id}/executions", params={"limit": 2})
    assert first.status_code == 200
    page = first.json()
    assert len(page) == 2 and set(page[0]) == {
        "executionId",
        "scheduledFor",
        "attempt",
        "state",
        "startedAt",
        "finishedAt",
        "error",
        "skipReason",
        "trigger",
        "dueAt",
        "dispatchedAt",
        "firstStartedAt",
        "startLagMs",
        "traceId",
        "attempts",
    }
    assert page[0]["scheduledFor"] > page[1]["scheduledFor"]
    link = first.headers["link"]
    assert link.endswith('rel="next"')
    collected = list(page)
    while "link" in first.headers:
        nxt = first.headers["link"].split(";")[0].strip("<>")
        first = client.get(nxt)
        collected += first.json()
    assert len(collected) == 5
    assert [e["error"] for e in collected] == ["HTTP 500", None, "HTTP 500", None, "HTTP 500"]


def test_preview_shows_dst_moves(client: httpx.Client) -> None:
    resp = client.get(
        "/v1/schedules/preview",
        params={"cron": "30 2 * * *", "tz": "America/New_York", "count": 3, "from": "2026-03-06T12:00:00Z"},
    )
    assert resp.status_code == 200, resp.text
    times = resp.json()["fireTimes"]
    assert [t["utc"][:16] for t in times] == ["2026-03-07T07:30", "2026-03-08T07:00", "2026-03-09T06:30"]
    assert times[0]["dstNote"] is None and times[1]["dstNote"]
    assert times[1]["local"].startswith("2026-03-08T03:00")
    bad = client.get("/v1/schedules/preview", params={"cron": "nope", "tz": "UTC"})
    assert bad.status_code == 422 and bad.json()["field"] == "cron"  # the query parameter
    assert client.get("/v1/schedules/preview", params={"cron": "* * * * *", "tz": "UTC", "count": 0}).status_code == 422


def test_openapi_health_and_readiness(api: ApiProcess) -> None:
    schema = httpx.get(f"{api.url}/schema/openapi.json").json()
    assert "/v1/jobs" in schema["paths"] and "/v1/schedules/preview" in schema["paths"]
    assert httpx.get(f"{api.url}/healthz").json() == {"status": "ok"}
    assert httpx.get(f"{api.url}/readyz").json() == {"status": "ready"}


def test_the_openapi_document_describes_the_resume_body(api: ApiProcess) -> None:
    doc = httpx.get(f"{api.url}/schema/openapi.json").json()
    body = doc["paths"]["/v1/jobs/{jobId}:resume"]["post"]["requestBody"]
    assert body["required"] is False
    ref = body["content"]["application/json"]["schema"]["$ref"].removeprefix("#/components/schemas/")
    missed = doc["components"]["schemas"][ref]["properties"]["missed"]
    assert sorted(missed["enum"]) == ["run_once", "skip"] and missed["default"] == "skip"
