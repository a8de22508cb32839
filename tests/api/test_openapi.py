"""The OpenAPI document a real `kairos api` serves: valid, one operation per action, and complete."""

from __future__ import annotations

import httpx
from openapi_spec_validator import validate

from tests.api.conftest import ApiProcess


def fetch(api: ApiProcess) -> dict:
    resp = httpx.get(f"{api.url}/schema/openapi.json")
    assert resp.status_code == 200
    return resp.json()


def operations(doc: dict) -> dict[str, tuple[str, str, dict]]:
    return {
        op["operationId"]: (method, path, op)
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if isinstance(op, dict) and "operationId" in op
    }


def refs(value: object) -> set[str]:
    if isinstance(value, dict):
        found = {value["$ref"]} if isinstance(value.get("$ref"), str) else set()
        return found.union(*(refs(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(refs(v) for v in value))
    return set()


def test_the_document_is_valid_and_every_reference_resolves(api: ApiProcess) -> None:
    doc = fetch(api)
    validate(doc)
    names = set(doc["components"]["schemas"])
    assert {r.removeprefix("#/components/schemas/") for r in refs(doc)} <= names


def test_one_operation_per_action_with_typed_bodies(api: ApiProcess) -> None:
    ops = operations(fetch(api))
    expected = {
        "PauseJob": ("post", "/v1/jobs/{jobId}:pause", None),
        "ResumeJob": ("post", "/v1/jobs/{jobId}:resume", "ResumeIn"),
        "RunJob": ("post", "/v1/jobs/{jobId}:run", "RunIn"),
        "BackfillJob": ("post", "/v1/jobs/{jobId}:backfill", "BackfillIn"),
        "ReplayExecution": ("post", "/v1/executions/{executionId}:replay", "ReplayIn"),
        "UpdateJob": ("patch", "/v1/jobs/{jobId}", "JobIn"),
        "CreateJob": ("post", "/v1/jobs", "JobIn"),
    }
    for op_id, (method, path, body) in expected.items():
        assert ops[op_id][:2] == (method, path), (op_id, ops[op_id][:2])
        if body is not None:
            schema = ops[op_id][2]["requestBody"]["content"]["application/json"]["schema"]
            assert body in str(schema), (op_id, schema)
    assert not {"JobAction", "PauseOrResumeJob"} & set(ops)
    assert not [p for p in fetch(api)["paths"] if "_ref}" in p]  # ids are named jobId / executionId


def test_bearer_security_and_problem_responses(api: ApiProcess) -> None:
    doc = fetch(api)
    assert doc["components"]["securitySchemes"]["bearer"] == {
        **doc["components"]["securitySchemes"]["bearer"],
        "type": "http",
        "scheme": "bearer",
    }
    assert doc["security"] == [{"bearer": []}]
    for op_id, (_method, path, op) in operations(doc).items():
        if not path.startswith("/v1"):
            assert op.get("security") == [], op_id
            continue
        problem = op["responses"]["401"]["content"]["application/problem+json"]["schema"]
        assert problem == {"$ref": "#/components/schemas/Problem"}, op_id
    create = operations(doc)["CreateJob"][2]["responses"]
    assert {"400", "409", "413", "422", "429"} <= set(create)


def test_schemas_carry_enums_formats_descriptions_and_an_example(api: ApiProcess) -> None:
    schemas = fetch(api)["components"]["schemas"]
    assert schemas["JobOut"]["properties"]["state"]["enum"] == ["active", "paused", "completed", "failed", "cancelled"]
    assert "dead" in schemas["ExecutionOut"]["properties"]["state"]["enum"]
    assert "discarded" in schemas["AttemptOut"]["properties"]["outcome"]["enum"]
    run_at = schemas["ScheduleIn"]["properties"]["runAt"]["oneOf"]
    assert {"type": "string", "format": "date-time"} in run_at
    assert schemas["JobOut"]["properties"]["createdAt"]["format"] == "date-time"
    assert schemas["JobIn"]["examples"][0]["schedule"]["cron"] and schemas["JobIn"]["description"]
