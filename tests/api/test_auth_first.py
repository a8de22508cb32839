"""Every /v1 route authenticates first: no key, or a wrong one, is 401 whatever the body or query holds."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from tests.api.conftest import ApiProcess, running_api

JOB = str(uuid.uuid4())
EXECUTION = str(uuid.uuid4())
# Each /v1 route with a request that would be refused as bad input (body or query) once authenticated.
BAD_REQUESTS = [
    ("POST", "/v1/jobs", {"json": {}}),
    ("POST", "/v1/jobs", {"content": b"{not json", "headers": {"Content-Type": "application/json"}}),
    ("POST", "/v1/jobs:batch", {"json": {"jobs": "no"}}),
    ("GET", "/v1/jobs", {"params": {"limit": "many"}}),
    ("GET", f"/v1/jobs/{JOB}", {}),
    ("PATCH", f"/v1/jobs/{JOB}", {"json": {"schedule": 3}}),
    ("DELETE", f"/v1/jobs/{JOB}", {}),
    ("POST", f"/v1/jobs/{JOB}:run", {"json": {"overlap": "sometimes"}}),
    ("POST", f"/v1/jobs/{JOB}:backfill", {"json": {}}),
    ("POST", f"/v1/jobs/{JOB}:resume", {"json": {"missed": 5}}),
    ("GET", f"/v1/jobs/{JOB}/executions", {"params": {"limit": "x"}}),
    ("GET", "/v1/dead-letters", {"params": {"limit": "x"}}),
    ("POST", "/v1/dead-letters:replay", {"json": {"limit": "all"}}),
    ("POST", f"/v1/executions/{EXECUTION}:replay", {"json": {"retry": 7}}),
    ("GET", f"/v1/executions/{EXECUTION}/attempts", {}),
    ("GET", "/v1/schedules/preview", {"params": {"count": "ten"}}),
    ("GET", "/v1/stats/lag", {"params": {"minutes": "x"}}),
    ("GET", "/v1/stats/due", {"params": {"hours": "x"}}),
    ("GET", "/v1/stats/outcomes", {"params": {"minutes": "x"}}),
    ("GET", "/v1/stats/queues", {}),
    ("GET", "/v1/stats/tenants", {}),
    ("GET", "/v1/status", {}),
]


@pytest.fixture(scope="module")
def unthrottled_api(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    # Many failed authentications from one address in a row: no throttle, so each answer is the 401 itself.
    with running_api(module_database_url, tmp_path_factory, KAIROS_AUTH_FAILURE_LIMIT="0") as (process, _log):
        yield process


@pytest.mark.parametrize("credential", [None, "Bearer not-a-key"])
@pytest.mark.parametrize(
    ("method", "path", "extra"),
    BAD_REQUESTS,
    ids=[f"{m} {p.replace(JOB, '{id}').replace(EXECUTION, '{id}')} {sorted(e)}" for m, p, e in BAD_REQUESTS],
)
def test_a_route_answers_401_before_it_looks_at_the_request(
    unthrottled_api: ApiProcess, credential: str | None, method: str, path: str, extra: dict
) -> None:
    extra = dict(extra)
    headers = dict(extra.pop("headers", {}))
    if credential:
        headers["Authorization"] = credential
    answer = httpx.request(method, unthrottled_api.url + path, headers=headers, timeout=10, **extra)
    assert answer.status_code == 401, answer.text
    assert answer.headers["content-type"].startswith("application/problem+json")


def test_every_v1_route_of_the_document_is_covered(unthrottled_api: ApiProcess) -> None:
    document = httpx.get(f"{unthrottled_api.url}/schema/openapi.json", timeout=10).json()
    covered = {
        (method, path.replace(JOB, "{jobId}").replace(EXECUTION, "{executionId}")) for method, path, _ in BAD_REQUESTS
    }
    templates = {
        (method.upper(), path)
        for path, item in document["paths"].items()
        if path.startswith("/v1")
        for method in item
        if method in ("get", "post", "patch", "delete", "put")
    }
    # The document's templates name the action routes by their template; those are covered by their actions.
    missing = {
        (m, p)
        for m, p in templates
        if (m, p) not in covered and not any(cm == m and _matches(p, cp) for cm, cp in covered)
    }
    assert not missing, missing


def _matches(template: str, path: str) -> bool:
    """Whether ``path`` (with ids as {jobId} or {executionId}) is an instance of the document's ``template``."""
    head = template.split("{", 1)[0]
    return path.startswith(head) and path.count("/") == template.count("/")
