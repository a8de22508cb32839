"""Inputs that once answered 500, over real HTTP against a `kairos api` process: each is now a 422
problem naming the field (a JSON Pointer into the body, or the query parameter's name), and
nothing is written."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import httpx
import pytest

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.api.test_dead_letters_api import dead_execution
from tests.api.test_jobs_api import once_job

PROBLEM = "application/problem+json"
DEEP = 1200  # past the ~1,000 levels where the JSON decoder's recursion stops


def problem_of(resp: httpx.Response, status: int = 422) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith(PROBLEM), resp.headers
    body = resp.json()
    assert body["status"] == status and body["detail"]
    return body


def jobs_of(api: ApiProcess, tenant: TenantKey) -> int:
    return query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,))[0][0]


def cron_job(**schedule) -> dict:
    return once_job(schedule={"cron": "0 9 * * *", "tz": "UTC", **schedule})


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def job_with(payload: str) -> str:
    """A queue job's JSON text around ``payload`` (JSON text too)."""
    head = '{"name":"a","target":{"type":"queue","ref":"emails"},"schedule":{"delaySeconds":60},"payload":'
    return head + payload + "}"


def z(at: datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (once_job(name="report\x00"), "/name"),
        (once_job(payload={"k": "a\x00b"}), "/payload"),
        (once_job(payload={"a\x00b": 1}), "/payload"),
        (once_job(target={"type": "http", "ref": "https://example.com/a\x00b"}), "/target/ref"),
        (
            once_job(target={"type": "http", "ref": "https://example.com/", "headers": {"X-A": "a\x00"}}),
            "/target/headers/X-A",
        ),
        (once_job(labels={"team": "a\x00"}), "/labels/team"),
        (cron_job(tz="UTC\x00"), "/schedule/tz"),
        (once_job(schedule={"cron": "0 9 * * *\x00", "tz": "UTC"}), "/schedule/cron"),
    ],
)
def test_a_nul_character_in_the_body_is_refused_naming_the_field(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, body: dict, field: str
) -> None:
    assert problem_of(client.post("/v1/jobs", json=body))["field"] == field
    assert jobs_of(api, tenant) == 0


@pytest.mark.parametrize(
    ("path", "params"),
    [
        ("/v1/jobs", {"name": "a\x00"}),
        ("/v1/jobs", {"namePrefix": "a\x00"}),
        ("/v1/jobs", {"label": "team:a\x00"}),
        ("/v1/jobs", {"state": "active\x00"}),
        ("/v1/dead-letters", {"jobId": "\x00"}),
        ("/v1/schedules/preview", {"cron": "0 9 * * *", "tz": "UTC", "gap": "shift\x00"}),
        ("/v1/stats/lag", {"minutes": "5\x00"}),
    ],
)
def test_a_nul_character_in_any_query_parameter_is_refused_naming_it(
    client: httpx.Client, path: str, params: dict
) -> None:
    [name] = [k for k, v in params.items() if "\x00" in v]
    problem = problem_of(client.get(path, params=params))
    assert problem["field"] == name and "NUL" in problem["detail"]


def test_every_query_parameter_of_the_document_refuses_a_nul(api: ApiProcess, client: httpx.Client) -> None:
    """Generated from /schema/openapi.json, so a query parameter added later is covered too."""
    document = httpx.get(f"{api.url}/schema/openapi.json").json()
    tried = 0
    for path, item in document["paths"].items():
        if "{" in path:
            continue
        for method, op in item.items():
            for param in op.get("parameters", []):
                if param["in"] != "query":
                    continue
                resp = client.request(method.upper(), path, params={param["name"]: "a\x00"})
                assert resp.status_code < 500, (method, path, param["name"], resp.text)
                if resp.status_code == 422:
                    assert problem_of(resp)["field"] == param["name"], (method, path)
                tried += 1
    assert tried >= 10


def test_a_payload_nested_past_the_decoders_limit_is_refused_on_every_route_that_takes_one(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    deep = nested(DEEP)
    assert problem_of(client.post("/v1/jobs", content=job_with(deep)))["field"] == "/payload"
    batch = '{"jobs":[' + job_with("1") + "," + job_with(deep) + "]}"
    assert problem_of(client.post("/v1/jobs:batch", content=batch))["field"] == "/jobs/1/payload"
    assert jobs_of(api, tenant) == 0
    job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    assert problem_of(client.patch(f"/v1/jobs/{job_id}", content='{"payload":' + deep + "}"))["field"] == "/payload"
    assert problem_of(client.post(f"/v1/jobs/{job_id}:resume", content=deep))["field"] == ""
    _, execution_id = dead_execution(api, client, attempts=1)
    replay = client.post(f"/v1/executions/{execution_id}:replay", content='{"payload":' + deep + "}")
    assert problem_of(replay)["field"] == "/payload"
    assert problem_of(client.post("/v1/dead-letters:replay", content=deep))["field"] == ""
    assert query(api.database_url, "SELECT state FROM executions WHERE execution_id = %s", (execution_id,)) == [
        ("dead",)
    ]


def test_a_payload_may_nest_64_levels_and_no_more(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    assert client.post("/v1/jobs", content=job_with(nested(64))).status_code == 201
    problem = problem_of(client.post("/v1/jobs", content=job_with(nested(65))))
    assert problem["field"] == "/payload" and "64" in problem["detail"]
    assert jobs_of(api, tenant) == 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (once_job(schedule={"runAt": "0001-01-01T00:00:00+23:59"}), "/schedule/runAt"),
        (once_job(schedule={"runAt": "9999-12-31T23:59:59-23:59"}), "/schedule/runAt"),
        (cron_job(startAt="0001-01-01T00:00:00+23:59"), "/schedule/startAt"),
        (cron_job(startAt="9999-12-31T23:00:00Z"), "/schedule/startAt"),
        (cron_job(endAt="9999-12-31T23:59:59-23:59"), "/schedule/endAt"),
        (once_job(schedule={"every": "1h", "startAt": "9999-12-31T23:00:00Z"}), "/schedule/startAt"),
        (once_job(schedule={"every": "1" * 5000 + "d"}), "/schedule/every"),
        (cron_job(tz="a" * 10_000), "/schedule/tz"),
    ],
)
def test_instants_and_durations_out_of_range_are_refused(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, body: dict, field: str
) -> None:
    problem = problem_of(client.post("/v1/jobs", json=body))
    assert problem["field"] == field
    assert len(problem["detail"]) < 300  # the input is not echoed whole
    assert jobs_of(api, tenant) == 0


def test_an_end_at_of_year_9999_still_means_never(client: httpx.Client) -> None:
    assert client.post("/v1/jobs", json=cron_job(endAt="9999-12-31T23:59:59Z")).status_code == 201


def test_a_job_update_refuses_instants_out_of_range(client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job()).json()["jobId"]
    for patch, field in (
        ({"schedule": {"startAt": "9999-12-31T23:00:00Z"}}, "/schedule/startAt"),
        ({"schedule": {"endAt": "0001-01-01T00:00:00+23:59"}}, "/schedule/endAt"),
    ):
        assert problem_of(client.patch(f"/v1/jobs/{job_id}", json=patch))["field"] == field
    assert client.get(f"/v1/jobs/{job_id}").json()["version"] == 1


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "9999-12-31T23:58:00Z"}, "from"),
        ({"from": "9999-12-31T23:58:00Z", "jitterSeconds": "86400"}, "from"),
        ({"from": "0001-01-01T00:00:00+23:59"}, "from"),
        ({"from": "2026-01-01T00:00:00"}, "from"),
        ({"cron": "0 9 * * * " + "1," * 5000}, "cron"),
    ],
)
def test_preview_refuses_instants_out_of_range_and_overlong_expressions(
    client: httpx.Client, params: dict, field: str
) -> None:
    query_ = {"cron": "* * * * *", "tz": "UTC", "count": "10", **params}
    assert problem_of(client.get("/v1/schedules/preview", params=query_))["field"] == field


def test_backfill_refuses_instants_out_of_range(client: httpx.Client) -> None:
    job_id = client.post("/v1/jobs", json=cron_job(cron="* * * * *")).json()["jobId"]
    for body, field in (
        ({"from": "0001-01-01T00:00:00Z", "to": "0001-01-01T00:10:00Z"}, "/from"),
        ({"from": "0001-01-01T00:00:00+23:59", "to": "2026-01-01T00:00:00Z"}, "/from"),
        ({"from": "2026-01-01T00:00:00", "to": "2026-01-01T00:10:00Z"}, "/from"),
    ):
        assert problem_of(client.post(f"/v1/jobs/{job_id}:backfill", json=body))["field"] == field


def test_bulk_replay_refuses_a_naive_finished_window(api: ApiProcess, client: httpx.Client) -> None:
    _, execution_id = dead_execution(api, client, attempts=1)
    for field in ("finishedAfter", "finishedBefore"):
        problem = problem_of(client.post("/v1/dead-letters:replay", json={field: "2020-01-01T00:00:00"}))
        assert problem["field"] == f"/{field}"
    assert query(api.database_url, "SELECT state FROM executions WHERE execution_id = %s", (execution_id,)) == [
        ("dead",)
    ]
    since = z(datetime.now(timezone.utc) - timedelta(days=1))
    assert client.post("/v1/dead-letters:replay", json={"finishedAfter": since}).json()["replayed"] == 1


def test_a_cron_expression_is_at_most_256_characters(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    ten_kb = "0 9 * * " + ",".join(["1"] * 5000)
    problem = problem_of(client.post("/v1/jobs", json=cron_job(cron=ten_kb)))
    assert problem["field"] == "/schedule/cron" and "256" in problem["detail"]
    assert jobs_of(api, tenant) == 0
    assert client.post("/v1/jobs", json=cron_job(cron="0 9 * * " + ",".join(["1"] * 124))).status_code == 201


def test_an_old_or_naive_cursor_is_refused(client: httpx.Client) -> None:
    import base64
    import json

    job_id = client.post("/v1/jobs", json=once_job()).json()["jobId"]
    naive = base64.urlsafe_b64encode(json.dumps(["2020-01-01T00:00:00", job_id]).encode()).decode()
    assert problem_of(client.get("/v1/jobs", params={"cursor": naive}))["field"] == "cursor"


def http_job(headers: dict) -> dict:
    return once_job(target={"type": "http", "ref": "https://example.com/", "headers": headers})


# RFC 9110 field-value: visible ASCII, with spaces and tabs only between visible characters.
BAD_HEADER_VALUES = ["café", "a\u2028b", "a\u0085b", "a\x01b", "a\x7fb", "a\tb\x1f", " leading", "trailing\t"]


@pytest.mark.parametrize("value", BAD_HEADER_VALUES)
def test_a_header_value_outside_the_field_value_grammar_is_refused_at_submit(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, value: str
) -> None:
    problem = problem_of(client.post("/v1/jobs", json=http_job({"X-Uni": value})))
    assert problem["field"] == "/target/headers/X-Uni"
    assert jobs_of(api, tenant) == 0


@pytest.mark.parametrize("name", ["X Uni", "X-Ü", "X:A", "", "X\x01"])
def test_a_header_name_outside_the_token_grammar_is_refused_at_submit(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, name: str
) -> None:
    problem = problem_of(client.post("/v1/jobs", json=http_job({name: "v"})))
    assert problem["field"].startswith("/target/headers")
    assert jobs_of(api, tenant) == 0


def test_good_header_values_are_kept(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    resp = client.post("/v1/jobs", json=http_job({"X-A": "a b\tc", "X-Empty": "", "X-Sym": "!~"}))
    assert resp.status_code == 201, resp.text


def test_bad_header_values_are_refused_by_patch_and_batch(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey
) -> None:
    job_id = client.post("/v1/jobs", json=http_job({"X-A": "ok"})).json()["jobId"]
    patched = problem_of(client.patch(f"/v1/jobs/{job_id}", json={"target": {"headers": {"X-Uni": "café"}}}))
    assert patched["field"] == "/target/headers/X-Uni"
    assert client.get(f"/v1/jobs/{job_id}").json()["target"]["headers"] == {"X-A": "ok"}
    batch = client.post("/v1/jobs:batch", json={"jobs": [http_job({"X-Ok": "fine"}), http_job({"X-Del": "a\x7f"})]})
    results = batch.json()["results"]
    assert "jobId" in results[0]
    assert results[1]["error"]["status"] == 422 and results[1]["error"]["field"] == "/jobs/1/target/headers/X-Del"
    assert jobs_of(api, tenant) == 2


@pytest.mark.parametrize(
    ("path", "param"),
    [
        ("/v1/jobs?limit=null", "limit"),
        ("/v1/jobs?limit=null&limit=null", "limit"),
        ("/v1/jobs?limit=1&limit=2", "limit"),
        ("/v1/jobs?limit=5.0", "limit"),
        ("/v1/jobs?state=active&state=paused", "state"),
        ("/v1/dead-letters?limit=null&limit=null", "limit"),
        ("/v1/stats/due?hours=null", "hours"),
        ("/v1/stats/due?hours=1.0", "hours"),
        ("/v1/stats/due?hours=1&hours=2", "hours"),
        ("/v1/stats/lag?minutes=null&minutes=null", "minutes"),
        ("/v1/stats/outcomes?minutes=true", "minutes"),
        ("/v1/schedules/preview?cron=0+9+*+*+*&tz=UTC&count=null", "count"),
    ],
)
def test_query_parameters_are_read_as_the_document_types_them(client: httpx.Client, path: str, param: str) -> None:
    """An integer parameter is digits (not null, true or 5.0), and a parameter that is not an array comes once."""
    assert problem_of(client.get(path))["field"] == param


def test_array_parameters_repeat_and_their_items_carry_the_rule(api: ApiProcess, client: httpx.Client) -> None:
    assert client.get("/v1/jobs?label=team:a&label=tier:b&limit=5").status_code == 200
    doc = httpx.get(f"{api.url}/schema/openapi.json").json()
    (label,) = [p for p in doc["paths"]["/v1/jobs"]["get"]["parameters"] if p["name"] == "label"]
    assert label["schema"]["type"] == "array" and "pattern" in label["schema"]["items"]
    assert "pattern" not in label["schema"]
