"""The executor's identity tokens: claims, one signature per (key, tenant, job, audience) for most of a
token's life, the token as the only Authorization, and no header without a key."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import jwt
import pytest
from cryptography.fernet import Fernet

from app.executor import oidc
from app.store import oidc_keys, sealing
from app.store.executions import Leased

KEYRING = sealing.Keyring([Fernet.generate_key().decode()])
T0 = 1_800_000_000.0


@pytest.fixture(autouse=True)
def config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(sealing, "current", lambda: KEYRING)
    oidc.configure(oidc.TokenConfig("https://kairos.example", 900))
    yield
    oidc.configure(None)


def leased(key: oidc_keys.NewKey | None, job: str = "job-1", auth: dict | None = None) -> Leased:
    now = datetime.now(timezone.utc)
    return Leased(
        "exec-1",
        job,
        "tenant-1",
        1,
        3,
        now,
        now,
        None,
        "http",
        "https://hooks.example/a",
        30,
        "s",
        http_auth=auth or {"type": "oidc"},
        oidc_key_id=key.key_id if key else None,
        oidc_key=key.private_key if key else None,
    )


def claims(value: str, key: oidc_keys.NewKey, audience: str) -> dict:
    token = value.removeprefix("Bearer ")
    public = jwt.PyJWK(key.public_jwk)
    return jwt.decode(
        token,
        public,
        algorithms=[key.algorithm],
        audience=audience,
        issuer="https://kairos.example",
        options={"verify_exp": False, "verify_iat": False},
    )


@pytest.mark.parametrize("algorithm", ["ES256", "RS256"])
def test_a_token_carries_the_claims_and_verifies_with_the_published_key(algorithm: oidc_keys.Algorithm) -> None:
    key = oidc_keys.new_key(algorithm, KEYRING)
    value = oidc.bearer(leased(key), now=T0)
    assert value is not None and value.startswith("Bearer ")
    got = claims(value, key, "https://hooks.example/a")  # no audience given: the target's URL
    assert got == {
        "iss": "https://kairos.example",
        "aud": "https://hooks.example/a",
        "sub": "tenants/tenant-1/jobs/job-1",
        "iat": int(T0),
        "exp": int(T0) + 900,
        "tenant_id": "tenant-1",
        "job_id": "job-1",
    }
    assert jwt.get_unverified_header(value.removeprefix("Bearer "))["kid"] == key.key_id


def test_one_token_serves_a_job_for_two_thirds_of_its_life() -> None:
    key = oidc_keys.new_key("ES256", KEYRING)
    first = oidc.bearer(leased(key), now=T0)
    assert oidc.bearer(leased(key), now=T0 + 599) == first  # 900 s tokens: reused while 300 s are left
    renewed = oidc.bearer(leased(key), now=T0 + 600)
    assert renewed != first and claims(renewed, key, "https://hooks.example/a")["iat"] == int(T0) + 600
    # Another job, another audience, another key: each its own token.
    assert oidc.bearer(leased(key, job="job-2"), now=T0) != first
    other = oidc.bearer(leased(key, auth={"type": "oidc", "audience": "api://x"}), now=T0)
    assert claims(other, key, "api://x")["aud"] == "api://x"
    assert oidc.bearer(leased(oidc_keys.new_key("ES256", KEYRING)), now=T0) != first


def test_the_token_is_the_only_authorization_sent() -> None:
    key = oidc_keys.new_key("ES256", KEYRING)
    headers = {"authorization": "Basic eDp5", "AUTHORIZATION": "x", "X-Team": "a"}
    oidc.authorize(headers, leased(key))
    assert set(headers) == {"X-Team", "Authorization"} and headers["Authorization"].startswith("Bearer ")


def test_without_a_signing_key_no_header_is_added() -> None:
    headers = {"X-Team": "a"}
    oidc.authorize(headers, leased(None))
    assert headers == {"X-Team": "a"}
