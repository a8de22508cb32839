"""The OpenAPI document describes every field a client sends or reads about a job, and what Kairos does."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import ApiProcess

DESCRIBED = [
    "JobIn",
    "TargetIn",
    "ScheduleIn",
    "RetryIn",
    "DstIn",
    "JobOut",
    "TargetOut",
    "ScheduleOut",
    "RetryOut",
    "ExecutionCounts",
    "BackfillIn",
    "BackfillOut",
    "RunIn",
    "ResumeIn",
]


@pytest.fixture(scope="module")
def document(api: ApiProcess) -> dict:
    return httpx.get(f"{api.url}/schema/openapi.json", timeout=10).json()


@pytest.mark.parametrize("name", DESCRIBED)
def test_every_field_of_a_job_schema_has_a_description(document: dict, name: str) -> None:
    schema = document["components"]["schemas"][name]
    missing = [field for field, prop in schema["properties"].items() if not prop.get("description")]
    assert missing == [], f"{name}: {missing}"


def test_the_document_says_what_kairos_schedules(document: dict) -> None:
    description = document["info"]["description"]
    assert "every" in description and "cron" in description and "one-off and cron jobs" not in description
