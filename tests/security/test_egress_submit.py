"""A job whose HTTP URL is a literal private, loopback, link-local or metadata address is refused at
submit with a 422 naming the field (not accepted and then dead at delivery), and nothing is written."""

from __future__ import annotations

import httpx
import pytest

from tests.api.conftest import ApiProcess, TenantKey, query  # fixtures: tests/security/conftest.py
from tests.api.test_jobs_api import once_job


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1/jobs",
        "http://169.254.169.254/latest/meta-data/",
        "http://10.0.0.1/hook",
        "http://[::ffff:127.0.0.1]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://[2002:7f00:1::]/",
        "http://[fec0::1]/",
        "http://localhost/x",
    ],
)
def test_internal_literal_targets_answer_422_naming_the_field(
    api: ApiProcess, client: httpx.Client, tenant: TenantKey, url: str
) -> None:
    resp = client.post("/v1/jobs", json=once_job(target={"type": "http", "ref": url}))
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["field"] == "/target/ref" and "egress policy" in problem["detail"]
    batch = client.post("/v1/jobs:batch", json={"jobs": [once_job(), once_job(target={"type": "http", "ref": url})]})
    assert batch.status_code == 200, batch.text  # per item: the valid one is created, this one refused
    created, refused = batch.json()["results"]
    assert "jobId" in created and refused["error"]["status"] == 422
    assert refused["error"]["field"] == "/jobs/1/target/ref"
    # Nothing of the refused jobs was written: the one job is the batch's valid item.
    assert query(api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,)) == [(1,)]


def test_a_public_literal_target_is_accepted(client: httpx.Client) -> None:
    resp = client.post("/v1/jobs", json=once_job(target={"type": "http", "ref": "https://93.184.215.14/hook"}))
    assert resp.status_code == 201, resp.text
