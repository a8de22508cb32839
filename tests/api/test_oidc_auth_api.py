"""A job's HTTP target may ask for a signed identity token (target.auth): the API stores and shows it,
refuses a bad one with a problem naming the field, documents it, and publishes the keys and the issuer
metadata without a key and with Cache-Control."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ApiProcess

PROBLEM = "application/problem+json"


def job(target: dict[str, Any]) -> dict[str, Any]:
    return {"name": "hook", "target": target, "schedule": {"delaySeconds": 60}}


def test_an_oidc_target_is_stored_shown_and_changed(client: httpx.Client) -> None:
    created = client.post(
        "/v1/jobs",
        json=job(
            {
                "type": "http",
                "ref": "https://hooks.example.com/a",
                "auth": {"type": "oidc", "audience": "https://hooks.example.com"},
            }
        ),
    )
    assert created.status_code == 201, created.text
    url = f"/v1/jobs/{created.json()['jobId']}"
    shown = client.get(url)
    assert shown.json()["target"]["auth"] == {"type": "oidc", "audience": "https://hooks.example.com"}
    # Without an audience the token's aud is the target's URL (as Cloud Scheduler does): none is stored.
    patched = client.patch(
        url,
        json={"target": {"auth": {"type": "oidc", "audience": None}}},
        headers={"Content-Type": "application/merge-patch+json", "If-Match": shown.headers["ETag"]},
    )
    assert patched.status_code == 200, patched.text
    assert client.get(url).json()["target"]["auth"] == {"type": "oidc"}
    removed = client.patch(
        url, json={"target": {"auth": None}}, headers={"Content-Type": "application/merge-patch+json"}
    )
    assert removed.status_code == 200, removed.text
    assert "auth" not in client.get(url).json()["target"]


@pytest.mark.parametrize(
    ("target", "pointer"),
    [
        ({"type": "http", "ref": "https://h.example.com/", "auth": {"type": "basic"}}, "/target/auth/type"),
        ({"type": "http", "ref": "https://h.example.com/", "auth": {}}, "/target/auth/type"),
        (
            {"type": "http", "ref": "https://h.example.com/", "auth": {"type": "oidc", "audience": ""}},
            "/target/auth/audience",
        ),
        (
            {"type": "http", "ref": "https://h.example.com/", "auth": {"type": "oidc", "audience": "a b"}},
            "/target/auth/audience",
        ),
        ({"type": "http", "ref": "https://h.example.com/", "auth": {"type": "oidc", "extra": 1}}, "/target/auth/extra"),
        ({"type": "http", "ref": "https://h.example.com/", "auth": "oidc"}, "/target/auth"),
        ({"type": "queue", "ref": "reports", "auth": {"type": "oidc"}}, "/target/auth"),
        (
            {
                "type": "http",
                "ref": "https://h.example.com/",
                "headers": {"Authorization": "Basic eDp5"},
                "auth": {"type": "oidc"},
            },
            "/target/headers/Authorization",
        ),
    ],
)
def test_a_bad_auth_object_is_a_problem_naming_its_field(
    client: httpx.Client, target: dict[str, Any], pointer: str
) -> None:
    answer = client.post("/v1/jobs", json=job(target))
    assert answer.status_code == 422, answer.text
    assert answer.headers["content-type"].startswith(PROBLEM)
    assert answer.json()["field"] == pointer, answer.json()
    assert client.get("/v1/jobs").json()["jobs"] == []  # nothing stored


def test_the_document_shows_the_auth_field(api: ApiProcess) -> None:
    schemas = httpx.get(f"{api.url}/schema/openapi.json", timeout=10).json()["components"]["schemas"]
    auth = schemas["TargetIn"]["properties"]["auth"]
    assert auth.get("description")
    kind = schemas["TargetAuth"]["properties"]["type"]
    assert kind.get("enum", [kind.get("const")]) == ["oidc"]
    assert schemas["TargetAuth"]["properties"]["audience"]["description"]


def test_the_keys_and_issuer_are_public_and_cacheable(api: ApiProcess) -> None:
    discovery = httpx.get(f"{api.url}/.well-known/openid-configuration", timeout=5)
    assert discovery.status_code == 200 and "max-age" in discovery.headers["cache-control"]
    assert discovery.json()["issuer"] == api.url
    assert discovery.json()["jwks_uri"] == f"{api.url}/.well-known/jwks.json"
    jwks = httpx.get(discovery.json()["jwks_uri"], timeout=5)
    assert jwks.status_code == 200 and jwks.headers["cache-control"] == "max-age=300, public"
    assert isinstance(jwks.json()["keys"], list)
