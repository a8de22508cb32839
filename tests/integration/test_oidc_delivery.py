"""Identity tokens end to end: the executor's HTTP pool delivers to a real receiver that verifies each
``Authorization: Bearer`` token against the key set a real ``kairos api`` process publishes, before and
after a key rotation (the retired key stays published, so its tokens still verify). The token comes
beside the ``Kairos-Signature`` HMAC, never instead of it."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from uuid import UUID

import httpx
import jwt
import pytest
from sqlalchemy import text

from app.executor import oidc
from app.executor.batching import Outcomes
from app.executor.http_pool import HTTP_QUEUE, HttpPool, HttpPoolConfig
from app.store import sealing
from app.store.db import Database, create_engine
from kairos_sdk.signature import verify
from tests import factories as tf
from tests.api.conftest import ApiProcess, running_api
from tests.integration.test_http_delivery_path import run_pool
from tests.integration.test_http_isolation import LOCAL
from tests.support.polling import poll

AHEAD_S = 6.0


async def _passed(instant: datetime) -> bool:
    return datetime.now(timezone.utc) > instant


@dataclass
class Verifier:
    """A webhook receiver that answers 200 only to a token the API's key set verifies for ``audience``, and
    records what it saw (each request's headers and body; the token's kid and claims, or why it refused)."""

    jwks_url: str
    issuer: str
    audience: str = ""
    seen: list[dict[str, Any]] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    requests: list[tuple[Message, bytes]] = field(default_factory=list)
    port: int = 0
    refresh: Any = None
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"


@pytest.fixture(scope="module")
def api(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    with running_api(module_database_url, tmp_path_factory) as (process, _log):
        yield process


@pytest.fixture
def verifier(api: ApiProcess) -> Iterator[Verifier]:
    discovery = httpx.get(f"{api.url}/.well-known/openid-configuration", timeout=5).json()
    state = Verifier(discovery["jwks_uri"], discovery["issuer"])
    # As a receiver keeps it: cached, fetched again when its lifespan ends (refresh() below stands for that).
    keys = jwt.PyJWKClient(state.jwks_url, cache_keys=True)
    state.refresh = lambda: keys.get_jwk_set(refresh=True)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with state.lock:
                state.requests.append((self.headers, body))
            status = 200
            try:
                scheme, _, token = self.headers.get("Authorization", "").partition(" ")
                assert scheme == "Bearer", f"no bearer token: {self.headers.get('Authorization')!r}"
                key = keys.get_signing_key_from_jwt(token)
                claims = jwt.decode(
                    token,
                    key,
                    algorithms=["ES256", "RS256"],
                    audience=state.audience,
                    issuer=state.issuer,
                    options={"require": ["exp", "iat", "sub"]},
                )
                with state.lock:
                    state.seen.append({"kid": jwt.get_unverified_header(token)["kid"], **claims})
            except Exception as exc:  # noqa: BLE001 - any failure to verify is a refusal, recorded
                status = 401
                with state.lock:
                    state.refused.append(repr(exc))
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.port = server.server_address[1]
    state.audience = state.url
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    oidc.configure(oidc.TokenConfig(state.issuer, 300))
    yield state
    oidc.configure(None)
    server.shutdown()
    server.server_close()


async def oidc_job(
    db: Database, tenant_id: UUID, url: str, auth: dict[str, str], headers: dict[str, str] | None = None
) -> UUID:
    job_id = await tf.job(db, tenant_id, queue=HTTP_QUEUE, target_ref=url)

    async def set_auth(conn: Any) -> None:
        await conn.execute(
            text(
                "UPDATE jobs SET http_auth = CAST(:auth AS JSONB), "
                "http_headers = CAST(:headers AS JSONB) WHERE job_id = :job_id"
            ),
            {"auth": json.dumps(auth), "headers": json.dumps(headers or {}), "job_id": job_id},
        )

    await tf.raw(db, set_auth)
    return job_id


async def deliver(db: Database, job_id: UUID, count: int = 1) -> list[str]:
    ids = await tf.ready_executions(db, job_id, count)
    await run_pool(db, HttpPool(db, Outcomes(db), HttpPoolConfig(poll_interval_s=0.05), egress=LOCAL), ids)
    return [
        r.state
        for r in await tf.raw(
            db, lambda c: c.execute(text("SELECT state FROM executions WHERE execution_id = ANY(:ids)"), {"ids": ids})
        )
    ]


async def test_a_receiver_verifies_the_token_against_the_jwks_across_a_rotation(
    api: ApiProcess, verifier: Verifier
) -> None:
    db = Database(create_engine(api.database_url, pool_size=2))
    try:
        keyring = sealing.current()
        first = await db.transaction(lambda tx: tx.oidc_keys.ensure("ES256", keyring))
        t = await tf.tenant(db)
        # The job's own Authorization header never reaches the receiver: the token replaces it.
        job_id = await oidc_job(db, t.tenant_id, verifier.url, {"type": "oidc"}, {"authorization": "Basic eDp5"})
        assert await deliver(db, job_id, 3) == ["succeeded"] * 3, verifier.refused
        assert verifier.refused == []
        claims = verifier.seen[0]
        assert claims["kid"] == first.key_id
        assert claims["iss"] == verifier.issuer and claims["aud"] == verifier.url  # the URL: no audience given
        assert claims["sub"] == f"tenants/{t.tenant_id}/jobs/{job_id}"
        assert claims["tenant_id"] == str(t.tenant_id) and claims["job_id"] == str(job_id)
        assert claims["exp"] - claims["iat"] == 300
        # The first key's token (cached: three deliveries, one token), to present again after the rotation.
        [old_token] = [value for (kid, *_), (value, _) in oidc._tokens.items() if kid == first.key_id]

        # The rotation publishes the new key at once; the first key signs until the new one's signs_from.
        rotated = await db.transaction(lambda tx: tx.oidc_keys.rotate("RS256", keyring, ahead_s=AHEAD_S, overlap_s=600))
        assert rotated.retired == [first.key_id]
        published = await asyncio.to_thread(httpx.get, verifier.jwks_url, timeout=5)
        assert published.headers["cache-control"] == "max-age=300, public"

        async def both_published() -> bool:  # the API reads the key set at most once a second
            keys = (await asyncio.to_thread(httpx.get, verifier.jwks_url, timeout=5)).json()["keys"]
            return [k["kid"] for k in keys] == [rotated.newest.key_id, first.key_id]

        await poll(both_published, timeout_s=5, what="the new key in the key set")
        assert await deliver(db, job_id) == ["succeeded"], verifier.refused
        assert verifier.seen[-1]["kid"] == first.key_id  # not yet the new key's turn

        async def receiver_has_it() -> bool:  # the receiver's cached key set expires: it fetches the new key
            return rotated.newest.key_id in [k.key_id for k in verifier.refresh().keys]

        await poll(receiver_has_it, timeout_s=5, what="the receiver's key set holds the new key")
        await poll(lambda: _passed(rotated.newest.signs_from), timeout_s=AHEAD_S + 5, what="the new key signs")
        assert await deliver(db, job_id) == ["succeeded"], verifier.refused
        assert verifier.seen[-1]["kid"] == rotated.newest.key_id  # new tokens: the new key (RS256)
        # A token the replaced key signed still verifies during the overlap.
        replayed = await asyncio.to_thread(
            httpx.post, verifier.url, headers={"Authorization": old_token}, content=b"{}"
        )
        assert replayed.status_code == 200
        assert verifier.seen[-1]["kid"] == first.key_id
    finally:
        await db.close()


async def test_a_token_for_another_audience_is_refused_by_the_receiver(api: ApiProcess, verifier: Verifier) -> None:
    db = Database(create_engine(api.database_url, pool_size=2))
    try:
        await db.transaction(lambda tx: tx.oidc_keys.ensure("ES256", sealing.current()))
        t = await tf.tenant(db)
        job_id = await oidc_job(db, t.tenant_id, verifier.url, {"type": "oidc", "audience": "https://elsewhere"})
        assert await deliver(db, job_id) == ["dead"]  # 401 from the receiver dead-letters at once
        assert verifier.seen == [] and "InvalidAudienceError" in verifier.refused[0]
    finally:
        await db.close()


async def test_a_delivery_with_an_identity_token_is_still_signed(api: ApiProcess, verifier: Verifier) -> None:
    db = Database(create_engine(api.database_url, pool_size=2))
    try:
        await db.transaction(lambda tx: tx.oidc_keys.ensure("ES256", sealing.current()))
        t = await tf.tenant(db)
        job_id = await oidc_job(db, t.tenant_id, verifier.url, {"type": "oidc"})
        assert await deliver(db, job_id) == ["succeeded"], verifier.refused
    finally:
        await db.close()
    [(headers, body)] = verifier.requests
    # One Authorization, the token the receiver verified, and the tenant's HMAC over the same body beside it.
    [bearer] = headers.get_all("Authorization") or []
    assert bearer.startswith("Bearer ") and verifier.seen[0]["sub"] == f"tenants/{t.tenant_id}/jobs/{job_id}"
    signature = headers["Kairos-Signature"]
    assert verify(t.signing_secret, signature, body)
    assert not verify(t.signing_secret, signature, body + b" ")


def docs_example() -> str:
    """The receiver's verification example in docs/http-delivery.md, as written."""
    doc = (Path(__file__).parents[2] / "docs" / "http-delivery.md").read_text()
    section = doc[doc.index("## Identity tokens") :]
    return section[
        section.index("```python\n") + len("```python\n") : section.index("```\n", section.index("```python"))
    ]


async def test_the_docs_verification_example_verifies_a_delivered_token(api: ApiProcess, verifier: Verifier) -> None:
    db = Database(create_engine(api.database_url, pool_size=2))
    try:
        await db.transaction(lambda tx: tx.oidc_keys.ensure("ES256", sealing.current()))
        t = await tf.tenant(db)
        job_id = await oidc_job(db, t.tenant_id, verifier.url, {"type": "oidc", "audience": "https://hooks.example"})
        await deliver(db, job_id)  # the receiver refuses it (another audience); the token is what we want
        [token] = [value for (_, _, job, _), (value, _) in oidc._tokens.items() if job == str(job_id)]
    finally:
        await db.close()
    code = docs_example()
    # Point the example at this Kairos (its ISSUER and AUDIENCE lines are the reader's to fill in).
    code = re.sub(r'(?m)^ISSUER = ".*?"', f'ISSUER = "{verifier.issuer}"', code)
    code = re.sub(r'(?m)^AUDIENCE = ".*?"', 'AUDIENCE = "https://hooks.example"', code)
    namespace: dict[str, Any] = {"request_headers": {"Authorization": token}}
    exec(compile(code, "docs/http-delivery.md", "exec"), namespace)
    assert namespace["job_id"] == str(job_id) and namespace["tenant_id"] == str(t.tenant_id)
    with pytest.raises(jwt.InvalidTokenError):
        namespace["verify_identity_token"]("Bearer " + token.removeprefix("Bearer ")[:-4] + "AAAA")
    with pytest.raises(jwt.InvalidTokenError):
        namespace["verify_identity_token"]("Basic eDp5")
