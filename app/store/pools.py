"""Shared worker pools (operator-created) and which tenants may target them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app.store.queries import q
from app.store.table import Table
from app.store.tenants import Tenants


@dataclass(frozen=True)
class SharedPool:
    name: str
    created_at: datetime
    tenants: tuple[str, ...]


class Pools(Table):
    """The pools statements of one transaction."""

    async def create(self, name: str, allow: list[UUID]) -> str | None:
        """Create the pool, grant ``allow``, and return its new worker key; None when the name is taken."""
        row = (await self._conn.execute(q("PoolInsert"), {"name": name})).first()
        if row is None:
            return None
        for tenant_id in allow:
            await self.grant(name, tenant_id)
        return await Tenants(self._conn).issue_key(None, pool=name, label=f"pool {name}")

    async def grant(self, pool: str, tenant_id: UUID) -> None:
        await self._conn.execute(q("PoolGrantInsert"), {"pool": pool, "tenant_id": tenant_id})

    async def issue_worker_key(self, pool: str) -> str:
        return await Tenants(self._conn).issue_key(None, pool=pool, label=f"pool {pool}")

    async def list_all(self) -> list[SharedPool]:
        rows = await self._conn.execute(q("PoolList"))
        return [SharedPool(r.name, r.created_at, tuple(r.tenants)) for r in rows]
