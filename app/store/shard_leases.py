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
    region: str | None = None  # the (last) owner's region (KAIROS_REGION); None without regions


@dataclass(frozen=True)
class Member:
    """A live scheduler process: its region and since when (database clock) it has been a member."""

    owner: str
    region: str | None
    started_at: datetime


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class ShardLeases(Table):
    """The shard leases statements of one transaction."""

    async def heartbeat_member(
        self, owner: str, ttl_s: float, now: datetime | None = None, *, region: str | None = None
    ) -> None:
        await self._conn.execute(
            q("SchedulerMemberHeartbeat"), {"owner": owner, "ttl_ms": _ms(ttl_s), "now": now, "region": region}
        )

    async def live_members(self, now: datetime | None = None) -> list[str]:
        return [m.owner for m in (await self.live_members_by_region(now))[1]]

    async def live_members_by_region(self, now: datetime | None = None) -> tuple[datetime | None, list[Member]]:
        """(the database clock they were read at, every live member); the clock is None when there are none."""
        rows = (await self._conn.execute(q("SchedulerMemberListLive"), {"now": now})).all()
        return (rows[0].as_of if rows else None), [Member(r.owner, r.region, r.started_at) for r in rows]

    async def leave(self, owner: str) -> None:
        await self._conn.execute(q("SchedulerMemberLeave"), {"owner": owner})

    async def sweep_members(self, grace_s: float, now: datetime | None = None) -> None:
        await self._conn.execute(q("SchedulerMemberSweep"), {"grace_ms": _ms(grace_s), "now": now})

    async def renew(self, owner: str, ttl_s: float, now: datetime | None = None) -> list[HeldShard]:
        rows = await self._conn.execute(q("ShardLeaseRenew"), {"owner": owner, "ttl_ms": _ms(ttl_s), "now": now})
        return [HeldShard(r.shard_id, r.revision) for r in rows]

    async def acquire(
        self,
        owner: str,
        limit: int,
        ttl_s: float,
        *,
        salt: int = 0,
        now: datetime | None = None,
        region: str | None = None,
        grace_s: float = 0.0,
        primary_region: str | None = None,
        never_owned: bool = True,
    ) -> list[HeldShard]:
        """Take up to ``limit`` shards whose lease ended ``grace_s`` ago or more, or at all when its last
        owner's region is not ``primary_region`` (``never_owned``: and shards nobody has held yet)."""
        if limit <= 0:
            return []
        rows = await self._conn.execute(
            q("ShardLeaseAcquire"),
            {
                "owner": owner,
                "limit": limit,
                "ttl_ms": _ms(ttl_s),
                "salt": salt % 256,
                "now": now,
                "region": region,
                "grace_ms": _ms(grace_s),
                "primary_region": primary_region,
                "never_owned": never_owned,
            },
        )
        return [HeldShard(r.shard_id, r.revision) for r in rows]

    async def release(self, owner: str, shard_ids: list[int], now: datetime | None = None) -> list[int]:
        if not shard_ids:
            return []
        rows = await self._conn.execute(
            q("ShardLeaseRelease"), {"owner": owner, "shard_ids": plain(shard_ids), "now": now}
        )
        return [r.shard_id for r in rows]

    async def list_all(self) -> list[ShardLease]:
        return [ShardLease(**r._mapping) for r in await self._conn.execute(q("ShardLeaseList"))]
