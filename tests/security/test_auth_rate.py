"""The failed-authentication throttle per client address, against a real `kairos api` process.

After KAIROS_AUTH_FAILURE_LIMIT failed attempts from one address, its failed attempts are answered
429 with Retry-After; a valid key from that address still passes (other clients' failures never
lock it out); other addresses are not affected. The episode is logged once, structured, and counted
in kairos_auth_throttled_total. X-Forwarded-For is believed only from KAIROS_TRUSTED_PROXIES. The
client binds its own loopback address (127.0.0.2, 127.0.0.3, ...) so each test is a distinct client.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import TenantKey, make_tenant, running_api
from tests.conftest import fresh_database
from tests.support.polling import wait_for

LIMIT = 5
PROXY = "127.0.0.8"
ADMIN_TOKEN = "operator-token-for-tests-only"
PROBLEM = "application/problem+json"


@dataclass(frozen=True)
class Api:
    url: str
    database_url: str
    log: Path


@pytest.fixture(scope="module")
def throttled_api(pg_base_url: str, pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    # One process: the buckets are per API process (docs/quotas.md), so one client meets one bucket.
    with (
        fresh_database(pg_base_url, pg_template) as database_url,
        running_api(
            database_url,
            tmp_path_factory,
            KAIROS_API_WORKERS="1",
            KAIROS_ADMIN_TOKEN=ADMIN_TOKEN,
            KAIROS_AUTH_FAILURE_LIMIT=str(LIMIT),
            KAIROS_AUTH_FAILURE_WINDOW_S="600",
            KAIROS_TRUSTED_PROXIES=PROXY,
        ) as (process, log),
    ):
        yield Api(process.url, database_url, log)


def client_from(address: str, api: Api) -> httpx.Client:
    return httpx.Client(base_url=api.url, timeout=10, transport=httpx.HTTPTransport(local_address=address))


def log_lines(api: Api) -> list[dict]:
    out = []
    for line in api.log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def throttled_count(api: Api) -> float:
    text = httpx.get(f"{api.url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("kairos_auth_throttled_total")
    )


@pytest.fixture(scope="module")
def tenant_key(throttled_api: Api) -> TenantKey:
    return make_tenant(throttled_api.database_url)


def test_after_the_limit_an_address_gets_429_for_failures_and_a_valid_key_still_passes(
    throttled_api: Api, tenant_key: TenantKey
) -> None:
    good = {"Authorization": f"Bearer {tenant_key.key}"}
    with client_from("127.0.0.2", throttled_api) as attacker, client_from("127.0.0.3", throttled_api) as bystander:
        assert attacker.get("/v1/jobs", headers=good).status_code == 200  # a good key costs nothing
        before = throttled_count(throttled_api)
        bad = [
            attacker.get("/v1/jobs", headers={"Authorization": f"Bearer guess-{i}"}).status_code
            for i in range(LIMIT - 1)
        ] + [attacker.get("/v1/jobs").status_code]  # no header is a failure too
        assert bad == [401] * LIMIT
        for headers in ({"Authorization": "Bearer guess-again"}, {}):
            resp = attacker.get("/v1/jobs", headers=headers)
            assert resp.status_code == 429, resp.text
            assert resp.headers["content-type"].startswith(PROBLEM)
            problem = resp.json()
            assert problem["type"] == "https://kairos.dev/problems/too-many-auth-failures"
            # The bucket refills LIMIT per 600 s: one attempt back after 120 s.
            assert 1 <= int(resp.headers["retry-after"]) <= 120
            assert problem["retryAfterSeconds"] == int(resp.headers["retry-after"])
        # A valid key from the throttled address is not refused for the failures made beside it.
        assert attacker.get("/v1/jobs", headers=good).status_code == 200
        assert attacker.post("/v1/jobs:batch", headers=good, json={"jobs": []}).status_code == 200
        # Another address, with the same good key, is unaffected.
        assert bystander.get("/v1/jobs", headers=good).status_code == 200
        assert bystander.post("/v1/jobs:batch", headers=good, json={"jobs": []}).status_code == 200
    assert throttled_count(throttled_api) - before == 2
    episodes = wait_for(
        lambda: [r for r in log_lines(throttled_api) if r.get("msg") == "authentication throttled"],
        timeout_s=10,
        what="the throttle's log line",
    )
    assert len(episodes) == 1
    assert episodes[0]["client"] == "127.0.0.2" and episodes[0]["limit"] == LIMIT
    assert episodes[0]["level"] == "warning" and episodes[0]["logger"] == "app.api.auth"
    assert "guess" not in throttled_api.log.read_text()  # no presented key reaches the log


def test_a_throttled_address_writes_nothing(throttled_api: Api, tenant_key: TenantKey) -> None:
    from tests.api.conftest import query

    def jobs() -> int:
        return query(throttled_api.database_url, "SELECT count(*) FROM jobs")[0][0]

    before = jobs()
    body = {"name": "n", "target": {"type": "queue", "ref": "p"}, "schedule": {"delaySeconds": 60}}
    with client_from("127.0.0.4", throttled_api) as attacker:
        for i in range(LIMIT):
            assert attacker.post("/v1/jobs", json=body, headers={"Authorization": f"Bearer x{i}"}).status_code == 401
        resp = attacker.post("/v1/jobs", json=body, headers={"Authorization": "Bearer x-again"})
    assert resp.status_code == 429
    assert jobs() == before


def test_a_throttled_address_cannot_try_the_admin_token_either(throttled_api: Api) -> None:
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    with client_from("127.0.0.5", throttled_api) as attacker:
        assert attacker.get("/v1/status", headers=admin).status_code == 200
        for i in range(LIMIT):  # wrong admin tokens are failed authentications like wrong keys
            assert attacker.get("/v1/status", headers={"Authorization": f"Bearer wrong-{i}"}).status_code == 401
        resp = attacker.get("/v1/status", headers=admin)
    assert resp.status_code == 429
    assert resp.json()["type"] == "https://kairos.dev/problems/too-many-auth-failures"


def test_x_forwarded_for_from_an_untrusted_peer_is_ignored(throttled_api: Api, tenant_key: TenantKey) -> None:
    good = {"Authorization": f"Bearer {tenant_key.key}"}
    with client_from("127.0.0.1", throttled_api) as rotating, client_from("127.0.0.7", throttled_api) as victim:
        # Rotating X-Forwarded-For from a peer that is not a trusted proxy (loopback is not, by default)
        # buys no fresh buckets.
        statuses = [
            rotating.get(
                "/v1/jobs", headers={"Authorization": f"Bearer r{i}", "X-Forwarded-For": f"198.51.100.{i}"}
            ).status_code
            for i in range(3 * LIMIT)
        ]
        assert statuses == [401] * LIMIT + [429] * (2 * LIMIT), statuses
        # Naming the victim's address costs the victim nothing.
        for i in range(2 * LIMIT):
            rotating.get("/v1/jobs", headers={"Authorization": f"Bearer v{i}", "X-Forwarded-For": "127.0.0.7"})
        assert victim.get("/v1/jobs", headers={"Authorization": "Bearer victim-typo"}).status_code == 401
        assert victim.get("/v1/jobs", headers=good).status_code == 200


def test_x_forwarded_for_from_a_trusted_proxy_names_the_client(throttled_api: Api) -> None:
    with client_from(PROXY, throttled_api) as proxy:

        def through(client: str, i: int) -> int:
            return proxy.get(
                "/v1/jobs", headers={"Authorization": f"Bearer p{i}", "X-Forwarded-For": client}
            ).status_code

        assert [through("203.0.113.9", i) for i in range(LIMIT + 1)] == [401] * LIMIT + [429]
        # Another client behind the same proxy has its own bucket.
        assert through("203.0.113.10", 99) == 401
