"""A value of the wrong type inside an object keyed by the client (labels, headers) is named by its key."""

from __future__ import annotations

import json

import pytest

from app import errors
from app.api import bodies
from app.api.jobs import schemas

JOB = {"name": "x", "target": {"type": "queue", "ref": "p"}, "schedule": {"delaySeconds": 1}}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"labels": {"team": 1}}, "/labels/team"),
        ({"labels": {"a": "ok", "b/c": True}}, "/labels/b~1c"),
        (
            {"target": {"type": "http", "ref": "https://example.com/", "headers": {"X-A": "a", "X-B": 2}}},
            "/target/headers/X-B",
        ),
    ],
)
def test_the_problem_names_the_key_of_the_bad_value(extra: dict, field: str) -> None:
    with pytest.raises(errors.InvalidInput) as refused:
        bodies.decode(json.dumps({**JOB, **extra}).encode(), schemas.JobIn)
    assert refused.value.field == field, refused.value.detail
    assert "Expected `str`" in refused.value.detail
