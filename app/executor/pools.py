"""Operator actions on shared pools (what ``kairos pools`` runs)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from app import errors
from app.store import Database, Store
from app.store.pools import SharedPool

__all__ = ["CreatedPool", "SharedPool", "create", "grant", "issue_key", "list_all"]


@dataclass(frozen=True)
class CreatedPool:
    name: str
    worker_key: str
    tenants: tuple[str, ...]


async def _tenant_ids(tx: Store, names: tuple[str, ...]) -> list[UUID]:
    ids: list[UUID] = []
    for name in names:
        t = await tx.tenants.get_by_name(name)
        if t is None:
            raise errors.TenantNotFound(f"no tenant named {name!r}")
        ids.append(t.tenant_id)
    return ids


async def create(db: Database, name: str, allow: tuple[str, ...]) -> CreatedPool:
    async def work(tx: Store) -> CreatedPool:
        key = await tx.pools.create(name, await _tenant_ids(tx, allow))
        if key is None:
            raise errors.InvalidInput("name", f"a shared pool named {name!r} exists")
        return CreatedPool(name, key, tuple(sorted(allow)))

    return await db.transaction(work)


async def grant(db: Database, name: str, allow: tuple[str, ...]) -> None:
    async def work(tx: Store) -> None:
        if not any(p.name == name for p in await tx.pools.list_all()):
            raise errors.InvalidInput("name", f"no shared pool named {name!r}")
        for tenant_id in await _tenant_ids(tx, allow):
            await tx.pools.grant(name, tenant_id)

    await db.transaction(work)


async def issue_key(db: Database, name: str) -> str:
    async def work(tx: Store) -> str:
        if not any(p.name == name for p in await tx.pools.list_all()):
            raise errors.InvalidInput("name", f"no shared pool named {name!r}")
        return await tx.pools.issue_worker_key(name)

    return await db.transaction(work)


async def list_all(db: Database) -> list[SharedPool]:
    return await db.transaction(lambda tx: tx.pools.list_all())
