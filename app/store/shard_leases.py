"""Scheduler shard leases and scheduler membership (the scheduler tier's side).

Lease times come from the database clock (``now``: None in production, a fixed instant in tests),
so clock skew between scheduler hosts can never make two owners of one shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.arrays import plain
from app.store.queries import q


@dataclass(frozen=True)
class HeldShard:
    """A shard this process holds, and the revision its dispatches must present."""

    shard_id: int
    revision: int


@dataclass(frozen=True)
class ShardLease:
    shard_id: int
    owner: str | None
    lease_until: datetime | None
    revision: int


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


async def heartbeat_member(conn: AsyncConnection, owner: str, ttl_s: float,
                           now: datetime | None = None) -> None:
    await conn.execute(q("SchedulerMemberHeartbeat"), {"owner": owner, "ttl_ms": _ms(ttl_s), "now": now})


async def live_members(conn: AsyncConnection, now: datetime | None = None) -> list[str]:
    return [r.owner for r in await conn.execute(q("SchedulerMemberListLive"), {"now": now})]


async def leave(conn: AsyncConnection, owner: str) -> None:
    await conn.execute(q("SchedulerMemberLeave"), {"owner": owner})


async def sweep_members(conn: AsyncConnection, grace_s: float, now: datetime | None = None) -> None:
    await conn.execute(q("SchedulerMemberSweep"), {"grace_ms": _ms(grace_s), "now": now})


async def renew(conn: AsyncConnection, owner: str, ttl_s: float,
                now: datetime | None = None) -> list[HeldShard]:
    rows = await conn.execute(q("ShardLeaseRenew"), {"owner": owner, "ttl_ms": _ms(ttl_s), "now": now})
    return [HeldShard(r.shard_id, r.revision) for r in rows]


async def acquire(conn: AsyncConnection, owner: str, limit: int, ttl_s: float, *, salt: int = 0,
                  now: datetime | None = None) -> list[HeldShard]:
    if limit <= 0:
        return []
    rows = await conn.execute(q("ShardLeaseAcquire"), {
        "owner": owner, "limit": limit, "ttl_ms": _ms(ttl_s), "salt": salt % 256, "now": now,
    })
    return [HeldShard(r.shard_id, r.revision) for r in rows]


async def release(conn: AsyncConnection, owner: str, shard_ids: list[int]) -> list[int]:
    if not shard_ids:
        return []
    rows = await conn.execute(q("ShardLeaseRelease"), {"owner": owner, "shard_ids": plain(shard_ids)})
    return [r.shard_id for r in rows]


async def list_all(conn: AsyncConnection) -> list[ShardLease]:
    return [ShardLease(**r._mapping) for r in await conn.execute(q("ShardLeaseList"))]
