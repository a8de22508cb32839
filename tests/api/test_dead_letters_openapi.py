"""The OpenAPI document of a running `kairos api` describes the dead-letter request bodies."""

from __future__ import annotations

from typing import Any

import httpx

from tests.api.conftest import ApiProcess


def body_schema(doc: dict[str, Any], path: str) -> tuple[bool, dict[str, Any]]:
    """Whether the body is required, and the component schema it names (through an optional null)."""
    body = doc["paths"][path]["post"]["requestBody"]
    schema = body["content"]["application/json"]["schema"]
    [ref] = [s["$ref"] for s in schema.get("oneOf", [schema]) if "$ref" in s]
    return body.get("required", False), doc["components"]["schemas"][ref.removeprefix("#/components/schemas/")]


def test_the_replay_routes_document_their_optional_bodies(api: ApiProcess) -> None:
    doc = httpx.get(f"{api.url}/schema/openapi.json").json()

    required, bulk = body_schema(doc, "/v1/dead-letters:replay")
    assert not required
    assert {"jobId", "finishedAfter", "finishedBefore", "limit"} <= set(bulk["properties"])

    required, one = body_schema(doc, "/v1/executions/{executionId}:replay")
    assert not required
    assert {"payload", "retry"} <= set(one["properties"])
    retry = one["properties"]["retry"]
    [retry_ref] = [s["$ref"] for s in retry.get("oneOf", [retry]) if "$ref" in s]
    retry_schema = doc["components"]["schemas"][retry_ref.removeprefix("#/components/schemas/")]
    assert {"maxAttempts", "backoffSeconds", "maxBackoffSeconds"} <= set(retry_schema["properties"])
