"""Identity tokens for HTTP targets (``Authorization: Bearer <JWT>``, docs/http-delivery.md).

A job whose target carries ``auth: {"type": "oidc", "audience": ...}`` is delivered with a JWT that
Kairos signs (PyJWT), as Cloud Scheduler's OIDC tokens are: ``iss`` (KAIROS_OIDC_ISSUER), ``aud`` (the
audience, else the target's URL), ``sub`` (``tenants/<tenant>/jobs/<job>``), ``iat``/``exp``
(KAIROS_OIDC_TOKEN_TTL_S), plus ``tenant_id`` and ``job_id``; the header's ``kid`` names the key
published at ``/.well-known/jwks.json``. The signing key comes with the leased row (``oidc_key_id`` and
the sealed ``oidc_key``, ``app.store.oidc_keys``): a rotation reaches the executor with its next lease.

Cost. Signing costs about 100 us (ES256) and an RSA key more, so a token is minted once per
(key, tenant, job, audience) and reused until a third of its life is left: a herd of one job's
deliveries signs once, and a hit is one dict look-up and one comparison. Each sealed key is opened
(Fernet, PEM) once per process.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from app.store import executions as ex
from app.store import oidc_keys, sealing

log = logging.getLogger(__name__)

__all__ = ["TokenConfig", "authorize", "bearer", "configure"]

# What the cache may hold before it starts over (tenants x jobs x audiences x keys).
TOKENS_CACHED_MAX = 100_000
# A token is reused while more than this share of its life is left (a receiver that gets it late still
# has minutes; the cache stays warm for two thirds of each token's life).
REUSE_LEFT_FRACTION = 1 / 3
# "No signing key" is logged at most this often.
MISSING_KEY_LOG_EVERY_S = 60.0


@dataclass(frozen=True)
class TokenConfig:
    issuer: str
    ttl_s: int


_config: TokenConfig | None = None
# (key id, tenant, job, audience) -> (the Authorization value, the instant it stops being reused)
_tokens: dict[tuple[str, str, str, str], tuple[str, float]] = {}
_keys: dict[str, tuple[str, Any]] = {}  # sealed value -> (algorithm, private key object)
_missing_logged_at = -MISSING_KEY_LOG_EVERY_S


def configure(config: TokenConfig | None) -> None:
    """Use ``config`` from now on (None: read the settings again at the next mint); forgets minted tokens."""
    global _config  # noqa: PLW0603 - the process's token settings
    _config = config
    _tokens.clear()


def _settings() -> TokenConfig:
    global _config  # noqa: PLW0603 - the process's token settings, read once
    if _config is None:
        from app.config import load

        settings = load()
        _config = TokenConfig(settings.issuer, settings.oidc_token_ttl_s)
    return _config


def bearer(item: ex.Leased, *, now: float | None = None) -> str | None:
    """The ``Authorization`` value for ``item`` (``Bearer <JWT>``), None when its target asks for no token or
    no key exists yet (logged)."""
    auth = item.http_auth
    if auth is None:
        return None
    key_id = item.oidc_key_id
    if key_id is None or item.oidc_key is None:
        _missing_key()
        return None
    audience = auth.get("audience") or item.target_ref
    cache_key = (key_id, item.tenant_id, item.job_id, audience)
    t = time.time() if now is None else now
    found = _tokens.get(cache_key)
    if found is not None and t < found[1]:
        return found[0]
    return _mint(cache_key, item.oidc_key, t)


def authorize(headers: dict[str, str], item: ex.Leased) -> None:
    """Put ``item``'s identity token in ``headers`` as its only Authorization (any other, in any case, goes)."""
    value = bearer(item)
    if value is None:
        return
    for name in [n for n in headers if n.lower() == "authorization"]:
        del headers[name]
    headers["Authorization"] = value


def _mint(cache_key: tuple[str, str, str, str], sealed: str, now: float) -> str:
    import jwt

    config = _settings()
    key_id, tenant_id, job_id, audience = cache_key
    algorithm, private_key = _opened(sealed)
    iat = int(now)
    claims = {
        "iss": config.issuer,
        "aud": audience,
        "sub": f"tenants/{tenant_id}/jobs/{job_id}",
        "iat": iat,
        "exp": iat + config.ttl_s,
        "tenant_id": tenant_id,
        "job_id": job_id,
    }
    value = "Bearer " + jwt.encode(claims, private_key, algorithm=algorithm, headers={"kid": key_id})
    if len(_tokens) >= TOKENS_CACHED_MAX:
        _tokens.clear()
    _tokens[cache_key] = (value, iat + config.ttl_s * (1 - REUSE_LEFT_FRACTION))
    return value


def _opened(sealed: str) -> tuple[str, Any]:
    found = _keys.get(sealed)
    if found is None:
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        key = oidc_keys.open_key(sealed, sealing.current())
        found = _keys[sealed] = (key.algorithm, load_pem_private_key(key.pem, password=None))
    return found


def _missing_key() -> None:
    global _missing_logged_at  # noqa: PLW0603 - a once-a-minute log, per process
    now = time.monotonic()
    if now - _missing_logged_at >= MISSING_KEY_LOG_EVERY_S:
        _missing_logged_at = now
        log.error(
            "an HTTP target asks for an identity token but no signing key exists: the delivery goes "
            "without one (run `kairos db rotate-oidc-key`, or any `kairos db upgrade`, to make it)"
        )
