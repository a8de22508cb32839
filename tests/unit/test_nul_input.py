"""PostgreSQL refuses NUL in text and JSONB: validation names the field before anything is written."""

from __future__ import annotations

import pytest

from app.domain import jobs
from app.errors import InvalidInput


@pytest.mark.parametrize("payload", [{"k": "a\x00b"}, {"a\x00": 1}, ["x", {"deep": ["\x00"]}], "\x00"])
def test_payload_with_nul_is_refused(payload: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        jobs.validate_payload(payload, 64 * 1024)
    assert refused.value.field == "payload"


@pytest.mark.parametrize("payload", [{"k": "\\u0000"}, {"k": "\\\\u0000"}, {"k": "u0000"}])
def test_text_that_only_looks_like_an_escape_is_kept(payload: object) -> None:
    assert jobs.validate_payload(payload, 64 * 1024) == payload


def test_name_and_target_with_nul_are_refused() -> None:
    with pytest.raises(InvalidInput) as name:
        jobs.validate_name("report\x00")
    assert name.value.field == "name"
    with pytest.raises(InvalidInput) as ref:
        jobs.validate_target("http", "https://example.com/\x00")
    assert ref.value.field == "target.ref"
    with pytest.raises(InvalidInput) as pool:
        jobs.validate_target("queue", "emails\x00")
    assert pool.value.field == "target.ref"
