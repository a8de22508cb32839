"""The keys that sign HTTP targets' identity tokens (docs/http-delivery.md, "Identity tokens").

Model. ``oidc_keys`` holds one row per key: its id (the tokens' ``kid``), algorithm (ES256 or RS256),
public half as a JWK (what ``/.well-known/jwks.json`` publishes) and private half sealed like the
tenants' signing secrets (``app.store.sealing``: ``fernet:<token>`` under KAIROS_SECRET_KEY). The
sealed value is a small JSON document holding the key id, the algorithm and the PKCS#8 PEM: the
lease (``ExecutionLeaseFair``) returns the signing key's id and sealed value with each row whose
target asks for a token, and the executor opens each stored value once (``app.executor.oidc``).

Rotation. The key that signs at a time is the one with the latest ``signs_from`` not after it. A
rotation stores a new newest key (``slot``; unique, so concurrent first starts make one) that is
published at once and signs from ``now + ahead`` (KAIROS_OIDC_KEY_PUBLISH_AHEAD_S): a verifier that
caches the key set has fetched it before it meets its first token. The key it replaces signs until
then and stays published ``overlap`` longer (``retire_at``), so every token it signed (they live
KAIROS_OIDC_TOKEN_TTL_S) still verifies. Keys past their ``retire_at`` are deleted by the next
rotation. The first key signs at once (no verifier has a key set yet).

Kairos-wide, not per tenant: one issuer signs every tenant's tokens, whose ``sub`` names the tenant
and the job.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from app.store import sealing
from app.store.queries import q
from app.store.table import Table

Algorithm = Literal["ES256", "RS256"]
ALGORITHMS: tuple[Algorithm, ...] = ("ES256", "RS256")
RSA_BITS = 2048


def algorithm_of(name: str) -> Algorithm:
    """``name`` (any case) as an Algorithm; ValueError for another."""
    for algorithm in ALGORITHMS:
        if name.upper() == algorithm:
            return algorithm
    raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}")


@dataclass(frozen=True)
class PublishedKey:
    key_id: str
    algorithm: str
    public_jwk: dict[str, Any]  # with kid, alg and use
    created_at: datetime
    signs_from: datetime  # published before: verifiers fetch it ahead of its first token
    retire_at: datetime | None  # None: the newest key (no end yet)


@dataclass(frozen=True)
class NewKey:
    key_id: str
    algorithm: Algorithm
    public_jwk: dict[str, Any]
    private_key: str  # sealed (fernet:...)


@dataclass(frozen=True)
class OpenedKey:
    """A private key as the signer uses it."""

    key_id: str
    algorithm: str
    pem: bytes


def new_key(algorithm: Algorithm, keyring: sealing.Keyring) -> NewKey:
    """A fresh key pair: the public half as a JWK, the private half sealed under ``keyring``."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, rsa
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm

    key_id = secrets.token_urlsafe(12)
    if algorithm == "ES256":
        ec_key = ec.generate_private_key(ec.SECP256R1())
        jwk = ECAlgorithm.to_jwk(ec_key.public_key(), as_dict=True)
        pem = ec_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    elif algorithm == "RS256":
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=RSA_BITS)
        jwk = RSAAlgorithm.to_jwk(rsa_key.public_key(), as_dict=True)
        pem = rsa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    else:
        raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}")
    jwk.pop("key_ops", None)  # RFC 7517 4.3: not with "use"
    jwk |= {"kid": key_id, "alg": algorithm, "use": "sig"}
    doc = json.dumps({"kid": key_id, "alg": algorithm, "pem": pem.decode()}, separators=(",", ":")).encode()
    return NewKey(key_id, algorithm, jwk, keyring.seal_bytes(doc))


def open_key(stored: str, keyring: sealing.Keyring) -> OpenedKey:
    """The private key in an ``oidc_keys.private_key`` value."""
    doc = json.loads(keyring.open_bytes(stored))
    return OpenedKey(doc["kid"], doc["alg"], doc["pem"].encode())


@dataclass(frozen=True)
class Rotated:
    newest: PublishedKey
    retired: list[str]  # the key(s) taken out of the slot, published until their retire_at
    deleted: int  # keys whose overlap had ended, forgotten


def _published(r: Any) -> PublishedKey:
    return PublishedKey(r.key_id, r.algorithm, r.public_jwk, r.created_at, r.signs_from, r.retire_at)


class OidcKeys(Table):
    """The identity-token keys' statements of one transaction."""

    async def published(self, *, now: datetime | None = None) -> list[PublishedKey]:
        """The keys a verifier may meet, newest first: a rotation's next key (published ahead), the signing
        one, and retired ones still in their overlap."""
        rows = (await self._conn.execute(q("OidcKeyPublished"), {"now": now})).all()
        return [_published(r) for r in rows]

    async def newest(self) -> PublishedKey | None:
        r = (await self._conn.execute(q("OidcKeyNewest"))).first()
        return None if r is None else _published(r)

    async def signing(self, *, now: datetime | None = None) -> tuple[PublishedKey, str] | None:
        """The key that signs at ``now`` and its sealed private half; None when none does yet."""
        r = (await self._conn.execute(q("OidcKeySigning"), {"now": now})).first()
        return None if r is None else (_published(r), str(r.private_key))

    async def _insert_newest(self, key: NewKey, now: datetime | None, signs_from: datetime | None) -> bool:
        row = (
            await self._conn.execute(
                q("OidcKeyInsertNewest"),
                {
                    "key_id": key.key_id,
                    "algorithm": key.algorithm,
                    "public_jwk": json.dumps(key.public_jwk),
                    "private_key": key.private_key,
                    "now": now,
                    "signs_from": signs_from,
                },
            )
        ).first()
        return row is not None

    async def ensure(
        self, algorithm: Algorithm, keyring: sealing.Keyring, *, now: datetime | None = None
    ) -> PublishedKey:
        """The newest key, made first (signing at once) when there is none; a concurrent maker's key wins."""
        found = await self.newest()
        if found is None:
            await self._insert_newest(new_key(algorithm, keyring), now, None)
            found = await self.newest()
        assert found is not None
        return found

    async def rotate(
        self,
        algorithm: Algorithm,
        keyring: sealing.Keyring,
        *,
        ahead_s: float,
        overlap_s: float,
        now: datetime | None = None,
    ) -> Rotated:
        """A new newest key, published now and signing ``ahead_s`` later (verifiers that cache the key set
        meet it before its first token); the key it replaces signs until then and stays published
        ``overlap_s`` more (tokens it signed still verify). Keys whose overlap has ended are deleted."""
        at = now or sealing.utcnow()
        signs_from = at + timedelta(seconds=ahead_s)
        deleted = (await self._conn.execute(q("OidcKeyDeleteRetired"), {"now": at})).rowcount
        retired = [
            r.key_id
            for r in (
                await self._conn.execute(
                    q("OidcKeyRetireNewest"), {"retire_at": signs_from + timedelta(seconds=overlap_s)}
                )
            ).all()
        ]
        await self._insert_newest(new_key(algorithm, keyring), at, signs_from)
        newest = await self.newest()
        assert newest is not None
        return Rotated(newest, retired, deleted)

    async def sealed_list(self) -> list[tuple[str, str]]:
        """Every key's (id, sealed private half): what a re-seal under a new KAIROS_SECRET_KEY reads."""
        rows = (await self._conn.execute(q("OidcKeySealedList"))).all()
        return [(r.key_id, r.private_key) for r in rows]

    async def reseal(self, key_id: str, expected: str, sealed: str) -> bool:
        """Store ``sealed`` as ``key_id``'s private half if it still holds ``expected``; whether it did."""
        row = (
            await self._conn.execute(q("OidcKeyReseal"), {"key_id": key_id, "expected": expected, "sealed": sealed})
        ).first()
        return row is not None
