"""A body field's bounds are declared once, on its wire type: decoding enforces them, the document shows them."""

from __future__ import annotations

import msgspec
import pytest

from app import errors
from app.api import bodies
from app.api.app import create_app
from app.api.jobs import schemas
from app.config import load
from app.domain import http_target
from app.domain import jobs as job_rules

JOB = b'{"name": "n", "target": {"type": "http", "ref": "https://example.com"}, "schedule": {"delaySeconds": 1}, '


@pytest.mark.parametrize(
    ("extra", "field", "detail"),
    [
        (b'"retry": {"maxAttempts": 0}}', "/retry/maxAttempts", f"must be between 1 and {job_rules.MAX_ATTEMPTS}"),
        (
            b'"retry": {"maxBackoffSeconds": 1e9}}',
            "/retry/maxBackoffSeconds",
            f"must be between backoffSeconds and {job_rules.MAX_BACKOFF_S}",
        ),
        (
            b'"retry": {"maxRetryDurationSeconds": 0}}',
            "/retry/maxRetryDurationSeconds",
            f"must be between 0 (exclusive) and {job_rules.MAX_RETRY_DURATION_S}",
        ),
        (b'"timeoutSeconds": 0}', "/timeoutSeconds", f"must be between 1 and {job_rules.MAX_TIMEOUT_S}"),
    ],
)
def test_a_value_outside_its_declared_range_is_refused_while_decoding(extra: bytes, field: str, detail: str) -> None:
    with pytest.raises(errors.InvalidInput) as refused:
        bodies.decode(JOB + extra, schemas.JobIn)
    assert (refused.value.field, refused.value.detail) == (field, detail)


JOB_PARTS = {
    "name": b'"n"',
    "target": b'{"type": "http", "ref": "https://example.com"}',
    "schedule": b'{"delaySeconds": 1}',
}


def job_with(**parts: bytes) -> bytes:
    return b"{" + b", ".join(b'"%s": %s' % (k.encode(), v) for k, v in {**JOB_PARTS, **parts}.items()) + b"}"


@pytest.mark.parametrize(
    ("body", "field", "detail"),
    [
        (job_with(name=b'""'), "/name", "must not be empty"),
        (job_with(name=b'"   "'), "/name", "must hold a character other than a space, and no NUL character (U+0000)"),
        (
            job_with(name=b'"report\\u0000"'),
            "/name",
            "must hold a character other than a space, and no NUL character (U+0000)",
        ),
        (
            job_with(name=b'"%s"' % (b"x" * (job_rules.MAX_NAME_LEN + 1))),
            "/name",
            f"must have at most {job_rules.MAX_NAME_LEN} characters",
        ),
        (
            job_with(target=b'{"type": "ftp", "ref": "x"}'),
            "/target/type",
            "must be one of 'http', 'queue' (got 'ftp')",
        ),
        (
            job_with(target=b'{"type": "queue", "ref": "a\\u0000"}'),
            "/target/ref",
            "must not contain the NUL character (U+0000)",
        ),
        (
            job_with(schedule=b'{"cron": "* * * * *", "tz": "UTC", "dst": {"gap": "later"}}'),
            "/schedule/dst/gap",
            "must be one of 'shift', 'skip' (got 'later')",
        ),
        (job_with(schedule=b'{"cron": "", "tz": "UTC"}'), "/schedule/cron", "must not be empty"),
        (
            job_with(target=b'{"type": "http", "ref": "https://e.com", "auth": {"type": "oidc", "audience": "a b"}}'),
            "/target/auth/audience",
            (
                f"an audience is 1-{http_target.MAX_AUDIENCE_LEN} visible ASCII characters without spaces (a URL or "
                "another string the receiver expects)"
            ),
        ),
        (
            job_with(labels=b'{"ok": "a", "Team": "b"}'),
            "/labels/Team",
            "a label key is 1-63 of a-z 0-9 . _ / - starting and ending with a letter or digit",
        ),
        (
            job_with(labels=b'{"a/b/": "x"}'),
            "/labels/a~1b~1",
            "a label key is 1-63 of a-z 0-9 . _ / - starting and ending with a letter or digit",
        ),
        (
            job_with(labels=b'{"team": "%s"}' % (b"x" * (job_rules.MAX_LABEL_VALUE_LEN + 1))),
            "/labels/team",
            f"must have at most {job_rules.MAX_LABEL_VALUE_LEN} characters",
        ),
        (
            job_with(labels=b"{%s}" % b", ".join(b'"k%d": "v"' % i for i in range(job_rules.MAX_LABELS + 1))),
            "/labels",
            f"must have at most {job_rules.MAX_LABELS} members",
        ),
    ],
)
def test_a_string_outside_its_declared_bounds_is_refused_in_words(body: bytes, field: str, detail: str) -> None:
    with pytest.raises(errors.InvalidInput) as refused:
        bodies.decode(body, schemas.JobIn)
    assert (refused.value.field, refused.value.detail) == (field, detail)


def test_the_document_carries_each_declared_bound() -> None:
    document = create_app(load(), None).openapi_schema.to_schema()  # type: ignore[arg-type]
    _, declared = msgspec.json.schema_components([schemas.JobIn], ref_template="#/components/schemas/{name}")
    for name in ("RetryIn", "ScheduleIn", "JobIn", "TargetIn"):
        shown = document["components"]["schemas"][name]["properties"]
        for field, prop in declared[name]["properties"].items():
            want = next((b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"), prop)
            got = next((b for b in shown[field].get("oneOf", [shown[field]]) if b.get("type") != "null"), shown[field])
            for key in (
                "minimum",
                "maximum",
                "exclusiveMinimum",
                "minLength",
                "maxLength",
                "pattern",
                "maxProperties",
                "enum",
            ):
                shown_value, declared_value = got.get(key), want.get(key)
                if key == "enum" and shown_value is not None:  # in any order; an optional Literal's null aside
                    shown_value = sorted(v for v in shown_value if v is not None)
                    declared_value = sorted(declared_value or ())
                assert shown_value == declared_value, (name, field, key)


def test_a_parameters_documented_bounds_are_those_its_handler_declares() -> None:
    app = create_app(load(), None)  # type: ignore[arg-type]
    document = app.openapi_schema.to_schema()
    declared = 0
    for path, item in document["paths"].items():
        for op in item.values():
            for param in op.get("parameters", []) if isinstance(op, dict) else []:
                schema = param["schema"]
                assert "oneOf" not in schema, (path, param["name"])  # left out, never null
                bounds = schema.get("items", schema)
                declared += any(k in bounds for k in ("minimum", "maxLength", "pattern", "format", "enum"))
    limit = next(p for p in document["paths"]["/v1/jobs"]["get"]["parameters"] if p["name"] == "limit")
    assert (limit["schema"]["minimum"], limit["schema"]["maximum"]) == (1, 500)
    label = next(p for p in document["paths"]["/v1/jobs"]["get"]["parameters"] if p["name"] == "label")
    assert label["schema"]["items"]["minLength"] == 1 and "minLength" not in label["schema"]
    assert declared >= 20
