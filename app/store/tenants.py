"""Tenants and API keys."""

from __future__ import annotations

import asyncio
import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from sqlalchemy import Row

from app import errors
from app.store import sealing
from app.store.queries import q
from app.store.table import Table

if TYPE_CHECKING:
    from app.store.db import Database

KEY_PREFIX = "kairos_"
KEY_MISS_TTL_S_DEFAULT = 2.0


@dataclass(frozen=True)
class Tenant:
    tenant_id: UUID
    name: str
    signing_secret: str  # as stored: sealed (app.store.sealing); signing_secrets_of opens it
    weight: int
    max_inflight: int
    max_dispatch_per_s: int
    created_at: datetime
    # Submit quotas (docs/quotas.md); None: no limit.
    max_active_jobs: int | None = None
    max_submit_per_s: int | None = None
    # Executions made by :run and :backfill (docs/quotas.md); None: no limit.
    max_manual_per_s: int | None = None
    max_manual_inflight: int | None = None


@dataclass(frozen=True)
class Principal:
    """Who a key belongs to: a tenant, or a worker key scoped to one shared pool."""

    tenant_id: UUID | None
    tenant_name: str | None
    pool: str | None


@dataclass(frozen=True, slots=True)
class SubmitQuota:
    """What the API checks at submit, and at :run and :backfill (docs/quotas.md); None: no limit."""

    max_active_jobs: int | None = None
    max_submit_per_s: int | None = None
    max_manual_per_s: int | None = None
    max_manual_inflight: int | None = None
    # Not checked at submit: the pace the scheduler dispatches the tenant's occurrences at, which a
    # submit's herd warning quotes (None: a tenant that does not exist).
    max_dispatch_per_s: int | None = None


NO_QUOTA = SubmitQuota()
# A quota passed as this to ``Tenants.set_quota`` is left as it is (None clears it).
UNCHANGED: Any = object()


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def hash_key(key: str) -> str:
    # Keys are 256-bit random tokens: a fast hash is enough (nothing to brute-force).
    return hashlib.sha256(key.encode()).hexdigest()


class KeyCache:
    """Resolved keys kept for ``ttl_s``, so the API and the worker protocol do not read
    api_keys on every call; a revoked key stops working within ``ttl_s``.

    Unknown keys are remembered too, for ``miss_ttl_s``: a client repeating a wrong key costs one
    lookup per ``miss_ttl_s``, and a key issued meanwhile works after at most that long (keys are
    new random tokens, so a miss is almost always a guess or a typo, never a key about to exist).
    ``resolve(..., queued=True)`` runs its lookup after the other queued ones, one at a time per
    process: a throttled client's guesses cost the database one lookup at a time, however many."""

    def __init__(
        self,
        ttl_s: float = 5.0,
        max_entries: int = 10_000,
        miss_ttl_s: float = KEY_MISS_TTL_S_DEFAULT,
    ) -> None:
        self.ttl_s = ttl_s
        self.miss_ttl_s = miss_ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Principal | None]] = {}
        self._queue: asyncio.Lock | None = None
        self.lookups = 0  # statements run, for tests

    def cached(self, key: str) -> tuple[bool, Principal | None]:
        """(found, principal): whether the cache knows ``key``, and what it resolves to (None: unknown)."""
        cached = self._entries.get(hash_key(key))
        if cached and cached[0] > time.monotonic():
            return True, cached[1]
        return False, None

    async def resolve(self, db: Database, key: str, *, queued: bool = False) -> Principal | None:
        found, principal = self.cached(key)
        if found:
            return principal
        if not queued:
            return await self._lookup(db, key)
        if self._queue is None:
            self._queue = asyncio.Lock()
        async with self._queue:
            found, principal = self.cached(key)
            return principal if found else await self._lookup(db, key)

    async def _lookup(self, db: Database, key: str) -> Principal | None:
        self.lookups += 1
        principal = await db.transaction(lambda s: s.tenants.resolve_key(key))
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        ttl = self.ttl_s if principal is not None else self.miss_ttl_s
        self._entries[hash_key(key)] = (time.monotonic() + ttl, principal)
        return principal


class QuotaCache:
    """Each tenant's submit quotas, read at most once per ``ttl_s`` per process: a tenant without
    quotas costs the submit path one dict lookup; a changed quota applies within ``ttl_s``.

    Concurrent submits that find the entry missing or stale share one read: when a busy tenant's
    entry expires, its hundreds of requests in flight wait for one statement, not one each."""

    def __init__(self, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[UUID, tuple[float, SubmitQuota]] = {}
        self._reading: dict[UUID, asyncio.Task[SubmitQuota]] = {}
        self.reads = 0  # statements run, for tests

    def cached(self, tenant_id: UUID) -> SubmitQuota | None:
        """The tenant's quotas if they are cached and fresh, without awaiting anything."""
        cached = self._entries.get(tenant_id)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        return None

    async def get(self, db: Database, tenant_id: UUID) -> SubmitQuota:
        """The tenant's quotas, read from the database unless cached."""
        if (cached := self.cached(tenant_id)) is not None:
            return cached
        loop = asyncio.get_running_loop()
        reading = self._reading.get(tenant_id)
        if reading is None or reading.get_loop() is not loop:
            reading = self._reading[tenant_id] = loop.create_task(self._read(db, tenant_id))
        return await asyncio.shield(reading)  # a caller that goes away leaves the read to the others

    async def _read(self, db: Database, tenant_id: UUID) -> SubmitQuota:
        try:
            self.reads += 1
            quota = await db.statement(lambda s: s.tenants.submit_quota(tenant_id))
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[tenant_id] = (time.monotonic() + self.ttl_s, quota)
            return quota
        finally:
            if self._reading.get(tenant_id) is asyncio.current_task():
                del self._reading[tenant_id]


def _tenant(row: Row[Any]) -> Tenant:
    return Tenant(**row._mapping)


class Tenants(Table):
    """The tenants statements of one transaction."""

    async def create(self, name: str, *, keyring: sealing.Keyring | None = None) -> tuple[Tenant, str] | None:
        """Create a tenant and its first API key; None when the name is taken. Its new signing secret is
        stored sealed (``signing_secrets_of`` opens it)."""
        sealed = (keyring or sealing.current()).seal(sealing.SigningSecrets(sealing.new_secret()))
        row = (
            await self._conn.execute(
                q("TenantInsert"),
                {
                    "tenant_id": uuid4(),
                    "name": name,
                    "signing_secret": sealed,
                },
            )
        ).first()
        if row is None:
            return None
        tenant = _tenant(row)
        key = await self.issue_key(tenant.tenant_id, label="initial")
        return tenant, key

    async def issue_key(self, tenant_id: UUID | None, *, pool: str | None = None, label: str = "") -> str:
        key = new_key()
        await self._conn.execute(
            q("ApiKeyInsert"),
            {
                "key_hash": hash_key(key),
                "tenant_id": tenant_id,
                "pool": pool,
                "label": label,
            },
        )
        return key

    async def rotate_key(self, tenant_id: UUID) -> tuple[str, int]:
        """Issue a new key and revoke all others; returns (key, how many were revoked)."""
        key = await self.issue_key(tenant_id, label="rotated")
        revoked = (
            await self._conn.execute(q("ApiKeyRevokeForTenant"), {"tenant_id": tenant_id, "keep_hash": hash_key(key)})
        ).all()
        return key, len(revoked)

    async def resolve_key(self, key: str) -> Principal | None:
        row = (await self._conn.execute(q("ApiKeyResolve"), {"key_hash": hash_key(key)})).first()
        if row is None:
            return None
        return Principal(row.tenant_id, row.tenant_name, row.pool)

    async def get_by_name(self, name: str) -> Tenant | None:
        row = (await self._conn.execute(q("TenantGetByName"), {"name": name})).first()
        return _tenant(row) if row else None

    async def get(self, tenant_id: UUID) -> Tenant | None:
        row = (await self._conn.execute(q("TenantGetById"), {"tenant_id": tenant_id})).first()
        return _tenant(row) if row else None

    async def list_all(self) -> list[Tenant]:
        return [_tenant(r) for r in await self._conn.execute(q("TenantList"))]

    async def set_quota(
        self,
        tenant_id: UUID,
        *,
        weight: int | None = None,
        max_inflight: int | None = None,
        max_dispatch_per_s: int | None = None,
        max_active_jobs: int | None = UNCHANGED,
        max_submit_per_s: int | None = UNCHANGED,
        max_manual_per_s: int | None = UNCHANGED,
        max_manual_inflight: int | None = UNCHANGED,
    ) -> Tenant | None:
        """Change the quotas given; the submit and manual-run quotas are cleared by None and kept by UNCHANGED."""
        row = (
            await self._conn.execute(
                q("TenantSetQuota"),
                {
                    "tenant_id": tenant_id,
                    "weight": weight,
                    "max_inflight": max_inflight,
                    "max_dispatch_per_s": max_dispatch_per_s,
                    "set_max_active_jobs": max_active_jobs is not UNCHANGED,
                    "max_active_jobs": None if max_active_jobs is UNCHANGED else max_active_jobs,
                    "set_max_submit_per_s": max_submit_per_s is not UNCHANGED,
                    "max_submit_per_s": None if max_submit_per_s is UNCHANGED else max_submit_per_s,
                    "set_max_manual_per_s": max_manual_per_s is not UNCHANGED,
                    "max_manual_per_s": None if max_manual_per_s is UNCHANGED else max_manual_per_s,
                    "set_max_manual_inflight": max_manual_inflight is not UNCHANGED,
                    "max_manual_inflight": None if max_manual_inflight is UNCHANGED else max_manual_inflight,
                },
            )
        ).first()
        return _tenant(row) if row else None

    async def submit_quota(self, tenant_id: UUID) -> SubmitQuota:
        """The tenant's submit and manual-run quotas and its dispatch pace (NO_QUOTA for a tenant that does not
        exist)."""
        row = (await self._conn.execute(q("TenantSubmitQuotaGet"), {"tenant_id": tenant_id})).first()
        if row is None:
            return NO_QUOTA
        return SubmitQuota(
            row.max_active_jobs,
            row.max_submit_per_s,
            row.max_manual_per_s,
            row.max_manual_inflight,
            row.max_dispatch_per_s,
        )

    async def active_job_count(self, tenant_id: UUID, cap: int) -> int:
        """The tenant's active and paused jobs, counted up to ``cap`` at most."""
        row = (await self._conn.execute(q("TenantActiveJobCount"), {"tenant_id": tenant_id, "cap": cap})).one()
        return int(row.active)

    async def manual_inflight_count(self, tenant_id: UUID, cap: int) -> int:
        """The tenant's unfinished manual and backfill executions, counted up to ``cap`` at most."""
        row = (await self._conn.execute(q("TenantManualInFlightCount"), {"tenant_id": tenant_id, "cap": cap})).one()
        return int(row.inflight)

    # -- signing secrets (app.store.sealing): sealed at rest, rotated with an overlap -------------

    async def signing_secrets(
        self, tenant_id: UUID, keyring: sealing.Keyring | None = None
    ) -> StoredSigningSecrets | None:
        """The tenant's signing secrets, opened; None when it does not exist."""
        row = (await self._conn.execute(q("TenantSigningSecretGet"), {"tenant_id": tenant_id})).first()
        if row is None:
            return None
        return StoredSigningSecrets(
            (keyring or sealing.current()).open(row.signing_secret), row.signing_secret_rotated_at
        )

    async def rotate_signing_secret(
        self, tenant_id: UUID, overlap_s: float, *, keyring: sealing.Keyring | None = None, now: datetime | None = None
    ) -> StoredSigningSecrets | None:
        """A new current secret; the one it replaces keeps signing as well for ``overlap_s`` (0: stops at once).

        A secret still in an earlier rotation's overlap is dropped: deliveries carry at most two signatures.
        None when the tenant does not exist; StoreConflict when its secret changed meanwhile.
        """
        keyring = keyring or sealing.current()
        row = (await self._conn.execute(q("TenantSigningSecretGet"), {"tenant_id": tenant_id})).first()
        if row is None:
            return None
        at = now or sealing.utcnow()
        old = keyring.open(row.signing_secret)
        new = sealing.SigningSecrets(sealing.new_secret())
        if overlap_s > 0:
            new = sealing.SigningSecrets(new.current, old.current, at + timedelta(seconds=overlap_s))
        rotated_at = await self._store_signing_secret(
            tenant_id, row.signing_secret, keyring.seal(new), rotated=True, now=at
        )
        if rotated_at is _MISSED:
            raise errors.StoreConflict("the signing secret changed meanwhile (another rotation?): run it again")
        return StoredSigningSecrets(new, rotated_at)

    async def seal_plaintext_signing_secrets(
        self, keyring: sealing.Keyring | None = None, *, limit: int = sealing.SEAL_BATCH_DEFAULT
    ) -> int:
        """Seal up to ``limit`` secrets still stored in plaintext (rows from before 0011); how many were."""
        keyring = keyring or sealing.current()
        rows = (await self._conn.execute(q("TenantSigningSecretPlaintextList"), {"limit": limit})).all()
        sealed = 0
        for r in rows:
            stored = await self._store_signing_secret(
                r.tenant_id, r.signing_secret, keyring.seal(keyring.open(r.signing_secret)), rotated=False
            )
            sealed += stored is not _MISSED
        return sealed

    async def reseal_signing_secrets(
        self, after: UUID | None, keyring: sealing.Keyring | None = None, *, limit: int = sealing.SEAL_BATCH_DEFAULT
    ) -> tuple[int, UUID | None]:
        """Re-seal under the keyring's first key the secrets, of up to ``limit`` tenants after ``after``, that
        another key sealed (or none); (how many were, where the next page starts: None after the last)."""
        keyring = keyring or sealing.current()
        rows = (await self._conn.execute(q("TenantSigningSecretPage"), {"after": after, "limit": limit})).all()
        resealed = 0
        for r in rows:
            if not keyring.sealed_by_primary(r.signing_secret):
                stored = await self._store_signing_secret(
                    r.tenant_id, r.signing_secret, keyring.seal(keyring.open(r.signing_secret)), rotated=False
                )
                resealed += stored is not _MISSED
        return resealed, (rows[-1].tenant_id if len(rows) == limit else None)

    async def _store_signing_secret(
        self, tenant_id: UUID, expected: str, sealed: str, *, rotated: bool, now: datetime | None = None
    ) -> Any:
        """TenantSigningSecretSet: the new rotation time, or _MISSED when the stored secret was not ``expected``."""
        row = (
            await self._conn.execute(
                q("TenantSigningSecretSet"),
                {
                    "tenant_id": tenant_id,
                    "expected": expected,
                    "sealed": sealed,
                    "rotated": rotated,
                    "now": now,
                },
            )
        ).first()
        return _MISSED if row is None else row.signing_secret_rotated_at


# -- signing secrets ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StoredSigningSecrets:
    """A tenant's signing secrets, opened, and when they were last rotated (None: never)."""

    secrets: sealing.SigningSecrets
    rotated_at: datetime | None


def signing_secrets_of(tenant: Tenant, keyring: sealing.Keyring | None = None) -> sealing.SigningSecrets:
    """The tenant's signing secrets, opened from its row."""
    return (keyring or sealing.current()).open(tenant.signing_secret)


_MISSED: Any = object()  # TenantSigningSecretSet found the secret changed (or the tenant gone)
