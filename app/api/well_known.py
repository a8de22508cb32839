"""The identity tokens' public keys and issuer metadata (OpenID Connect Discovery 1.0, RFC 7517).

Unauthenticated and cacheable: receivers of HTTP deliveries fetch them to verify the ``Authorization:
Bearer`` token a target with ``auth: {"type": "oidc"}`` receives (docs/http-delivery.md). The key set
holds the current signing key and the keys retired by a rotation until their overlap ends
(``app.store.oidc_keys``); a receiver that meets an unknown ``kid`` fetches it again.
"""

from __future__ import annotations

import time
from typing import Any

from litestar import Controller, get
from litestar.datastructures import CacheControlHeader, State

from app.store import Database, Store
from app.store.oidc_keys import ALGORITHMS

JWKS_PATH = "/.well-known/jwks.json"
CONFIGURATION_PATH = "/.well-known/openid-configuration"
# How long a receiver may keep the key set: a rotation's new key signs at once, so a verifier that meets
# an unknown kid should fetch again rather than wait (PyJWKClient does).
JWKS_MAX_AGE_S = 300
CONFIGURATION_MAX_AGE_S = 3600
# The key set read from the database at most this often per process: the route needs no key, so a flood
# of requests costs one read per interval rather than one each (a rotation shows within it).
JWKS_READ_EVERY_S = 1.0


class WellKnownController(Controller):
    include_in_schema = True
    tags = ["identity tokens"]

    @get(
        JWKS_PATH,
        operation_id="JwksGet",
        cache_control=CacheControlHeader(max_age=JWKS_MAX_AGE_S, public=True),
        summary="The public keys that verify the identity tokens HTTP targets receive (a JWK Set).",
    )
    async def jwks(self, state: State) -> dict[str, Any]:
        kept: tuple[float, dict[str, Any]] | None = state.get("jwks")
        now = time.monotonic()
        if kept is not None and now < kept[0]:
            return kept[1]
        db: Database = state.db

        async def read(tx: Store) -> list[dict[str, Any]]:
            return [k.public_jwk for k in await tx.oidc_keys.published()]

        document = {"keys": await db.transaction(read)}
        state.jwks = (now + JWKS_READ_EVERY_S, document)
        return document

    @get(
        CONFIGURATION_PATH,
        operation_id="OpenidConfigurationGet",
        cache_control=CacheControlHeader(max_age=CONFIGURATION_MAX_AGE_S, public=True),
        summary="The identity tokens' issuer metadata (OpenID Connect Discovery): issuer and jwks_uri.",
    )
    async def configuration(self, state: State) -> dict[str, Any]:
        issuer: str = state.settings.issuer
        return {
            "issuer": issuer,
            "jwks_uri": issuer + JWKS_PATH,
            "id_token_signing_alg_values_supported": list(ALGORITHMS),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "claims_supported": ["iss", "aud", "sub", "iat", "exp", "tenant_id", "job_id"],
        }
