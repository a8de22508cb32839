"""Shared worker pools (operator-created) and which tenants may target them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store import tenants
from app.store.queries import q


@dataclass(frozen=True)
class SharedPool:
    name: str
    created_at: datetime
    tenants: tuple[str, ...]


async def create(conn: AsyncConnection, name: str, allow: list[UUID]) -> str | None:
    """Create the pool, grant ``allow``, and return its new worker key; None when the name is taken."""
    row = (await conn.execute(q("PoolInsert"), {"name": name})).first()
    if row is None:
        return None
    for tenant_id in allow:
        await grant(conn, name, tenant_id)
    return await tenants.issue_key(conn, None, pool=name, label=f"pool {name}")


async def grant(conn: AsyncConnection, pool: str, tenant_id: UUID) -> None:
    await conn.execute(q("PoolGrantInsert"), {"pool": pool, "tenant_id": tenant_id})


async def issue_worker_key(conn: AsyncConnection, pool: str) -> str:
    return await tenants.issue_key(conn, None, pool=pool, label=f"pool {pool}")


async def list_all(conn: AsyncConnection) -> list[SharedPool]:
    rows = await conn.execute(q("PoolList"))
    return [SharedPool(r.name, r.created_at, tuple(r.tenants)) for r in rows]
