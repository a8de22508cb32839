"""Tenants and API keys."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID, uuid4

from sqlalchemy import Row

from app.store.queries import q
from app.store.table import Table

if TYPE_CHECKING:
    from app.store.db import Database

KEY_PREFIX = "kairos_"


@dataclass(frozen=True)
class Tenant:
    tenant_id: UUID
    name: str
    signing_secret: str
    weight: int
    max_inflight: int
    max_dispatch_per_s: int
    created_at: datetime
    # Submit quotas (docs/quotas.md); None: no limit.
    max_active_jobs: int | None = None
    max_submit_per_s: int | None = None


@dataclass(frozen=True)
class Principal:
    """Who a key belongs to: a tenant, or a worker key scoped to one shared pool."""

    tenant_id: UUID | None
    tenant_name: str | None
    pool: str | None


@dataclass(frozen=True, slots=True)
class SubmitQuota:
    """What the API checks at submit (docs/quotas.md); None: no limit."""

    max_active_jobs: int | None = None
    max_submit_per_s: int | None = None


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
    api_keys on every call; a revoked key stops working within ``ttl_s``."""

    def __init__(self, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[str, tuple[float, Principal]] = {}

    async def resolve(self, db: Database, key: str) -> Principal | None:
        digest = hash_key(key)
        cached = self._entries.get(digest)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        principal = await db.transaction(lambda s: s.tenants.resolve_key(key))
        if principal is not None:
            if len(self._entries) >= self.max_entries:
                self._entries.clear()
            self._entries[digest] = (time.monotonic() + self.ttl_s, principal)
        return principal


class QuotaCache:
    """Each tenant's submit quotas, read at most once per ``ttl_s`` per process: a tenant without
    quotas costs the submit path one dict lookup; a changed quota applies within ``ttl_s``."""

    def __init__(self, ttl_s: float = 5.0, max_entries: int = 10_000) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self._entries: dict[UUID, tuple[float, SubmitQuota]] = {}

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
        quota = await db.transaction(lambda s: s.tenants.submit_quota(tenant_id))
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[tenant_id] = (time.monotonic() + self.ttl_s, quota)
        return quota


def _tenant(row: Row[Any]) -> Tenant:
    return Tenant(**row._mapping)


class Tenants(Table):
    """The tenants statements of one transaction."""

    async def create(self, name: str) -> tuple[Tenant, str] | None:
        """Create a tenant and its first API key; None when the name is taken."""
        row = (await self._conn.execute(q("TenantInsert"), {
            "tenant_id": uuid4(), "name": name, "signing_secret": secrets.token_hex(32),
        })).first()
        if row is None:
            return None
        tenant = _tenant(row)
        key = await self.issue_key(tenant.tenant_id, label="initial")
        return tenant, key

    async def issue_key(self, tenant_id: UUID | None, *, pool: str | None = None,
                        label: str = "") -> str:
        key = new_key()
        await self._conn.execute(q("ApiKeyInsert"), {
            "key_hash": hash_key(key), "tenant_id": tenant_id, "pool": pool, "label": label,
        })
        return key

    async def rotate_key(self, tenant_id: UUID) -> tuple[str, int]:
        """Issue a new key and revoke all others; returns (key, how many were revoked)."""
        key = await self.issue_key(tenant_id, label="rotated")
        revoked = (await self._conn.execute(q("ApiKeyRevokeForTenant"),
                                            {"tenant_id": tenant_id, "keep_hash": hash_key(key)})).all()
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

    async def set_quota(self, tenant_id: UUID, *, weight: int | None = None,
                        max_inflight: int | None = None, max_dispatch_per_s: int | None = None,
                        max_active_jobs: int | None = UNCHANGED,
                        max_submit_per_s: int | None = UNCHANGED) -> Tenant | None:
        """Change the quotas given; the submit quotas are cleared by None and kept by UNCHANGED."""
        row = (await self._conn.execute(q("TenantSetQuota"), {
            "tenant_id": tenant_id, "weight": weight, "max_inflight": max_inflight,
            "max_dispatch_per_s": max_dispatch_per_s,
            "set_max_active_jobs": max_active_jobs is not UNCHANGED,
            "max_active_jobs": None if max_active_jobs is UNCHANGED else max_active_jobs,
            "set_max_submit_per_s": max_submit_per_s is not UNCHANGED,
            "max_submit_per_s": None if max_submit_per_s is UNCHANGED else max_submit_per_s,
        })).first()
        return _tenant(row) if row else None

    async def submit_quota(self, tenant_id: UUID) -> SubmitQuota:
        """The tenant's submit quotas (NO_QUOTA for a tenant that has none, or does not exist)."""
        row = (await self._conn.execute(q("TenantSubmitQuotaGet"), {"tenant_id": tenant_id})).first()
        if row is None or (row.max_active_jobs is None and row.max_submit_per_s is None):
            return NO_QUOTA
        return SubmitQuota(row.max_active_jobs, row.max_submit_per_s)

    async def active_job_count(self, tenant_id: UUID, cap: int) -> int:
        """The tenant's active and paused jobs, counted up to ``cap`` at most."""
        row = (await self._conn.execute(q("TenantActiveJobCount"), {"tenant_id": tenant_id, "cap": cap})).one()
        return int(row.active)
