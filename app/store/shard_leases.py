"""Scheduler shard leases and scheduler membership (the scheduler tier's side).

Lease times come from the database clock (``now``: None in production, a fixed instant in tests),
so clock skew between scheduler hosts can never make two owners of one shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from app.store.arrays import plain
from app.store.queries import q
from app.store.table import Table


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


class ShardLeases(Table):
    """The shard leases statements of one transaction."""

    async def heartbeat_member(self, owner: str, ttl_s: float,
                               now: datetime | None = None) -> None:
        await self._conn.execute(q("SchedulerMemberHeartbeat"), {"owner": owner, "ttl_ms": _ms(ttl_s), "now": now})

    async def live_members(self, now: datetime | None = None) -> list[str]:
        return [r.owner for r in await self._conn.execute(q("SchedulerMemberListLive"), {"now": now})]

    async def leave(self, owner: str) -> None:
        await self._conn.execute(q("SchedulerMemberLeave"), {"owner": owner})

    async def sweep_members(self, grace_s: float, now: datetime | None = None) -> None:
        await self._conn.execute(q("SchedulerMemberSweep"), {"grace_ms": _ms(grace_s), "now": now})

    async def renew(self, owner: str, ttl_s: float,
                    now: datetime | None = None) -> list[HeldShard]:
        rows = await self._conn.execute(q("ShardLeaseRenew"), {"owner": owner, "ttl_ms": _ms(ttl_s), "now": now})
        return [HeldShard(r.shard_id, r.revision) for r in rows]

    async def acquire(self, owner: str, limit: int, ttl_s: float, *, salt: int = 0,
                      now: datetime | None = None) -> list[HeldShard]:
        if limit <= 0:
            return []
        rows = await self._conn.execute(q("ShardLeaseAcquire"), {
            "owner": owner, "limit": limit, "ttl_ms": _ms(ttl_s), "salt": salt % 256, "now": now,
        })
        return [HeldShard(r.shard_id, r.revision) for r in rows]

    async def release(self, owner: str, shard_ids: list[int]) -> list[int]:
        if not shard_ids:
            return []
        rows = await self._conn.execute(q("ShardLeaseRelease"), {"owner": owner, "shard_ids": plain(shard_ids)})
        return [r.shard_id for r in rows]

    async def list_all(self) -> list[ShardLease]:
        return [ShardLease(**r._mapping) for r in await self._conn.execute(q("ShardLeaseList"))]
