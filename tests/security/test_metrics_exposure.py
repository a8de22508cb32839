"""What the metrics ports show, and to whom: they listen on loopback unless told otherwise, /metrics
takes a bearer token when KAIROS_METRICS_TOKEN is set (the probes never do), and the API port's
public /metrics carries no tenant-labelled series (docs/observability.md)."""

from __future__ import annotations

import httpx

from app.config import load
from app.observability.probes import serve_probes
from tests.api.conftest import ApiProcess, TenantKey
from tests.api.test_jobs_api import once_job
from tests.api.test_quotas import set_quota


def test_the_metrics_port_listens_on_loopback_by_default() -> None:
    assert load({}).metrics_host == "127.0.0.1"
    assert load({"KAIROS_METRICS_HOST": "0.0.0.0"}).metrics_host == "0.0.0.0"
    assert load({}).metrics_token == ""


async def test_a_metrics_token_guards_metrics_and_not_the_probes() -> None:
    async def metrics() -> bytes:
        return b"kairos_up 1\n"

    async def ready() -> None:
        return None

    server = await serve_probes("127.0.0.1", 0, metrics=metrics, ready=ready, metrics_token="scrape-token-0123456789")
    assert server is not None
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with httpx.AsyncClient() as client:
            for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic c2NyYXBl"}):
                refused = await client.get(f"{url}/metrics", headers=headers)
                assert refused.status_code == 401, headers
                assert "kairos_up" not in refused.text
                assert refused.headers["www-authenticate"] == "Bearer"
            ok = await client.get(f"{url}/metrics", headers={"Authorization": "Bearer scrape-token-0123456789"})
            assert (ok.status_code, ok.text) == (200, "kairos_up 1\n")
            assert (await client.get(f"{url}/healthz")).status_code == 200
            assert (await client.get(f"{url}/readyz")).status_code == 200
    finally:
        server.close()


def test_the_api_ports_metrics_carry_no_tenant_label(api: ApiProcess, client: httpx.Client, tenant: TenantKey) -> None:
    set_quota(api, tenant, max_active_jobs=1)
    assert client.post("/v1/jobs", json=once_job()).status_code == 201
    assert client.post("/v1/jobs", json=once_job()).status_code == 429
    text = httpx.get(f"{api.url}/metrics", timeout=10).text
    refusals = [line for line in text.splitlines() if line.startswith("kairos_quota_refusals_total")]
    assert refusals, text[-2000:]
    assert "tenant" not in "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert str(tenant.tenant_id) not in text


def test_with_a_metrics_token_the_api_port_answers_metrics_to_it_only(
    module_database_url: str, tmp_path_factory
) -> None:
    from tests.api.conftest import running_api

    token = "scrape-token-abcdef0123456789"
    with running_api(module_database_url, tmp_path_factory, KAIROS_API_WORKERS="1", KAIROS_METRICS_TOKEN=token) as (
        process,
        _log,
    ):
        refused = httpx.get(f"{process.url}/metrics", timeout=10)
        assert refused.status_code == 401 and "kairos_" not in refused.text
        assert refused.headers["www-authenticate"] == "Bearer"
        ok = httpx.get(f"{process.url}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=10)
        assert ok.status_code == 200 and "kairos_" in ok.text
        assert httpx.get(f"{process.url}/healthz", timeout=10).status_code == 200
