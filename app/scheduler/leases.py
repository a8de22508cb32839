"""ShardLeaser: hold a fair share of the 256 shards, renew them, hand them back.

Every tick runs one transaction that (1) heartbeats this process's membership row, (2) renews
its unexpired leases, (3) reads the live members and computes this process's fair share
(256 // n, the first 256 % n members by owner take one more), then (4) releases its excess or
acquires unowned/expired shards up to the share. Every acquisition bumps the shard's revision;
the dispatcher presents (owner, revision) in each dispatch transaction, so a process that lost a
shard while paused cannot dispatch for it. Lease times are on the database clock.

Regions (active-passive, docs/regions.md): with a primary region configured, only the primary
region's members split the shards as above. A scheduler of another region (a standby) takes only
shards whose lease ended ``standby_grace_s`` ago, so while the primary region renews its leases
the standby holds nothing, and when the primary region is lost the standby's members split the
shards among themselves after the TTL plus the grace. With ``failback`` a standby hands every
shard back once a primary-region member has been live for the grace (``share_target``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from app import errors, observability
from app.config import Settings
from app.domain.shards import SHARD_COUNT
from app.duties import run_every
from app.store import Database, Store
from app.store.shard_leases import Member

log = logging.getLogger(__name__)

# Renewing far more often than the TTL means a slow tick or two never costs a shard, and a
# dead process's shards are taken over within one interval of their expiry.
LEASER_INTERVAL_MAX_S = 1.0
# Membership rows of processes dead for this long are deleted by the survivors.
MEMBER_SWEEP_GRACE_S = 3600.0
# Ticks between sweeps of departed members (with the default 1 s tick: every ten minutes).
MEMBER_SWEEP_EVERY_TICKS = 600

Clock = Callable[[], datetime]


REGION_TAKEOVER_GRACE_S_DEFAULT = 15.0


class LeaseChanges(NamedTuple):
    """What one leaser tick changed: the shards this process gained and the ones it lost."""

    gained: set[int]
    lost: set[int]


@dataclass(frozen=True)
class LeaserConfig:
    ttl_s: float = 10.0
    # Time between ticks; 0 means min(ttl_s / 3, LEASER_INTERVAL_MAX_S).
    interval_s: float = 0.0
    # This process's region and the primary region; either empty: this scheduler is active.
    region: str = ""
    primary_region: str = ""
    # A standby takes a shard only once its lease ended this long ago; fail-back waits as long.
    standby_grace_s: float = REGION_TAKEOVER_GRACE_S_DEFAULT
    failback: bool = True

    def __post_init__(self) -> None:
        if self.standby_grace_s < 0:
            raise ValueError("standby_grace_s must be >= 0")

    @property
    def tick_s(self) -> float:
        return self.interval_s or min(self.ttl_s / 3, LEASER_INTERVAL_MAX_S)

    @property
    def standby(self) -> bool:
        """Whether this scheduler stands by for the primary region."""
        return not in_primary_region(self.region, self.primary_region)

    @classmethod
    def from_settings(cls, settings: Settings) -> LeaserConfig:
        return cls(
            ttl_s=settings.lease_ttl_s,
            interval_s=settings.leaser_interval_s,
            region=settings.region.strip(),
            primary_region=settings.primary_region.strip(),
            standby_grace_s=settings.region_takeover_grace_s,
            failback=settings.region_failback,
        )


def fair_share(members: Iterable[str], me: str, shard_count: int = SHARD_COUNT) -> int:
    """How many shards ``me`` should hold when ``members`` are alive: an exact, even split."""
    ordered = sorted(set(members) | {me})
    n = len(ordered)
    return shard_count // n + (1 if ordered.index(me) < shard_count % n else 0)


def in_primary_region(region: str | None, primary_region: str) -> bool:
    """No primary region configured, or no region given: every scheduler is in the primary region."""
    return not primary_region or not region or region == primary_region


@dataclass(frozen=True)
class ShareTarget:
    """What one tick aims for: how many shards to hold and which ones it may take."""

    shards: int
    grace_s: float = 0.0  # a shard's lease must have ended this long ago (a standby's wait)
    never_owned: bool = True  # shards nobody has held yet are free to take


def share_target(members: Iterable[Member], as_of: datetime | None, me: str, config: LeaserConfig) -> ShareTarget:
    """This process's share given the live ``members`` (read on the database clock ``as_of``)."""
    members = list(members)
    primary = [m for m in members if in_primary_region(m.region, config.primary_region)]
    if not config.standby:
        return ShareTarget(fair_share((m.owner for m in primary), me))
    primary_back = [
        m
        for m in primary
        if m.owner != me and as_of is not None and (as_of - m.started_at).total_seconds() >= config.standby_grace_s
    ]
    if config.failback and primary_back:
        return ShareTarget(0, config.standby_grace_s, never_owned=False)
    standbys = [m.owner for m in members if not in_primary_region(m.region, config.primary_region)]
    # Never-owned shards (a fresh installation) are the primary region's while any of it is live, and
    # a standby takes them only after standing by for the grace without seeing it.
    waited = any(
        m.owner == me and as_of is not None and (as_of - m.started_at).total_seconds() >= config.standby_grace_s
        for m in members
    )
    return ShareTarget(fair_share(standbys, me), config.standby_grace_s, never_owned=not primary and waited)


class Ownership:
    """The shards this process holds (shard_id -> revision), shared by leaser, loader and dispatcher."""

    def __init__(self) -> None:
        self._held: dict[int, int] = {}
        self._listeners: list[Callable[[set[int], set[int]], None]] = []

    @property
    def held(self) -> Mapping[int, int]:
        return self._held

    def revision(self, shard_id: int) -> int | None:
        return self._held.get(shard_id)

    def on_change(self, listener: Callable[[set[int], set[int]], None]) -> None:
        """``listener(gained, lost)``; a shard re-acquired under a new revision is in both."""
        self._listeners.append(listener)

    def replace(self, held: Mapping[int, int]) -> tuple[set[int], set[int]]:
        before = self._held
        lost = {s for s, rev in before.items() if held.get(s) != rev}
        gained = {s for s, rev in held.items() if before.get(s) != rev}
        self._held = dict(held)
        if gained or lost:
            shards = len(self._held) - len(before)
            if shards:
                observability.shards_owned.add(shards)
            for listener in self._listeners:
                listener(gained, lost)
        return gained, lost


class ShardLeaser:
    def __init__(
        self,
        db: Database,
        owner: str,
        ownership: Ownership,
        config: LeaserConfig = LeaserConfig(),
        clock: Clock | None = None,
    ) -> None:
        self.db = db
        self.owner = owner
        self.ownership = ownership
        self.config = config
        self.clock = clock  # None: the database clock
        self._salt = zlib.crc32(owner.encode()) % 256
        # Monotonic deadline after which held leases must be presumed expired (no renewal seen).
        self._valid_until = 0.0
        self.last_pass_at = time.monotonic()  # the end of the loop's latest pass, failed or not (liveness)

    def _now(self) -> datetime | None:
        return self.clock() if self.clock else None

    async def run_once(self) -> LeaseChanges:
        """One tick: the shards gained and lost."""
        now = self._now()
        cfg = self.config
        started = time.monotonic()

        region = cfg.region or None

        async def tick(tx: Store) -> dict[int, int]:
            await tx.shard_leases.heartbeat_member(self.owner, cfg.ttl_s, now, region=region)
            renewed = await tx.shard_leases.renew(self.owner, cfg.ttl_s, now)
            held = {h.shard_id: h.revision for h in renewed}
            as_of, members = await tx.shard_leases.live_members_by_region(now)
            share = share_target(members, as_of, self.owner, cfg)
            target = share.shards
            if len(held) > target:
                excess = sorted(held)[target:]
                for shard_id in await tx.shard_leases.release(self.owner, excess, now):
                    held.pop(shard_id, None)
            elif len(held) < target:
                got = await tx.shard_leases.acquire(
                    self.owner,
                    target - len(held),
                    cfg.ttl_s,
                    salt=self._salt,
                    now=now,
                    region=region,
                    grace_s=share.grace_s,
                    primary_region=cfg.primary_region or None,
                    never_owned=share.never_owned,
                )
                held.update({h.shard_id: h.revision for h in got})
            return held

        held = await self.db.transaction(tick)
        self._valid_until = started + cfg.ttl_s
        gained, lost = self.ownership.replace(held)
        if gained or lost:
            log.info(
                "shard ownership changed",
                extra={
                    "owner": self.owner,
                    "held": len(held),
                    "gained": len(gained),
                    "lost": len(lost),
                    "region": cfg.region or None,
                    "standby": cfg.standby,
                },
            )
        return LeaseChanges(gained, lost)

    def expire_if_stale(self) -> None:
        """No renewal within the TTL (database unreachable): stop acting on any shard."""
        if self.ownership.held and time.monotonic() > self._valid_until:
            log.warning("shard leases presumed expired: no renewal within the TTL", extra={"owner": self.owner})
            self.ownership.replace({})

    async def sweep(self) -> None:
        now = self._now()
        await self.db.transaction(lambda tx: tx.shard_leases.sweep_members(MEMBER_SWEEP_GRACE_S, now))

    async def release_all(self) -> list[int]:
        """Graceful shutdown: hand every shard back and leave the membership at once."""
        held = sorted(self.ownership.held)
        self.ownership.replace({})

        async def leave(tx: Store) -> list[int]:
            released = await tx.shard_leases.release(self.owner, held, self._now())
            await tx.shard_leases.leave(self.owner)
            return released

        released = await self.db.transaction(leave)
        log.info("shards released", extra={"owner": self.owner, "released": len(released)})
        return released

    async def renew_in_time(self) -> LeaseChanges:
        """``run_once``, abandoned once the leases it would renew have run out: a database that does not
        answer cannot keep this process acting on shards past their TTL. The shards are dropped at the
        deadline itself (another scheduler may hold them a moment later), while the cancelled statement
        may take a few seconds more to give up its connection."""
        remaining = self._valid_until - time.monotonic()
        # Holding nothing, a slow tick costs nothing: it gets a whole TTL (a first acquisition may be slow).
        budget = max(self.config.tick_s, remaining) if self.ownership.held else self.config.ttl_s
        expiry = asyncio.get_running_loop().call_later(budget + 0.01, self.expire_if_stale)
        try:
            async with asyncio.timeout(budget):
                return await self.run_once()
        except TimeoutError:
            self.expire_if_stale()  # the cancellation may have been quicker than the timer
            raise errors.DatabaseUnavailable(f"shard leases not renewed within {budget:.1f} s") from None
        finally:
            expiry.cancel()

    async def stand_down(self) -> None:
        """Hand every shard back and leave, when this process cannot make progress on them."""
        if self.ownership.held:
            log.warning("cannot make progress: handing the shards back", extra={"owner": self.owner})
            await self.release_all()

    async def run(self, stop: asyncio.Event, may_hold: Callable[[], bool] = lambda: True) -> None:
        """Tick until ``stop``; while ``may_hold()`` is false, hold nothing (``stand_down``)."""
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            try:
                if not may_hold():
                    await self.stand_down()
                    return
                await self.renew_in_time()
                if ticks % MEMBER_SWEEP_EVERY_TICKS == 0:
                    await self.sweep()
                ticks += 1
            finally:
                self.last_pass_at = time.monotonic()

        # A tick that fails (the database unreachable) drops the shards once their TTL is past.
        await run_every(f"shard-leaser[{self.owner}]", self.config.tick_s, stop, tick, on_error=self.expire_if_stale)
