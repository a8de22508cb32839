"""ShardLeaser: hold a fair share of the 256 shards, renew them, hand them back.

Every tick runs one transaction that (1) heartbeats this process's membership row, (2) renews
its unexpired leases, (3) reads the live members and computes this process's fair share
(256 // n, the first 256 % n members by owner take one more), then (4) releases its excess or
acquires unowned/expired shards up to the share. Every acquisition bumps the shard's revision;
the dispatcher presents (owner, revision) in each dispatch transaction, so a process that lost a
shard while paused cannot dispatch for it. Lease times are on the database clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from app import errors, observability
from app.config import Settings
from app.domain.shards import SHARD_COUNT
from app.duties import run_every
from app.store import Database, Store

log = logging.getLogger(__name__)

# Renewing far more often than the TTL means a slow tick or two never costs a shard, and a
# dead process's shards are taken over within one interval of their expiry.
LEASER_INTERVAL_MAX_S = 1.0
# Membership rows of processes dead for this long are deleted by the survivors.
MEMBER_SWEEP_GRACE_S = 3600.0
# Ticks between sweeps of departed members (with the default 1 s tick: every ten minutes).
MEMBER_SWEEP_EVERY_TICKS = 600

Clock = Callable[[], datetime]


@dataclass(frozen=True)
class LeaserConfig:
    ttl_s: float = 10.0
    # Time between ticks; 0 means min(ttl_s / 3, LEASER_INTERVAL_MAX_S).
    interval_s: float = 0.0

    @property
    def tick_s(self) -> float:
        return self.interval_s or min(self.ttl_s / 3, LEASER_INTERVAL_MAX_S)

    @classmethod
    def from_settings(cls, settings: Settings) -> LeaserConfig:
        return cls(ttl_s=settings.lease_ttl_s, interval_s=settings.leaser_interval_s)


def fair_share(members: Iterable[str], me: str, shard_count: int = SHARD_COUNT) -> int:
    """How many shards ``me`` should hold when ``members`` are alive: an exact, even split."""
    ordered = sorted(set(members) | {me})
    n = len(ordered)
    return shard_count // n + (1 if ordered.index(me) < shard_count % n else 0)


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
    def __init__(self, db: Database, owner: str, ownership: Ownership, config: LeaserConfig = LeaserConfig(),
                 clock: Clock | None = None) -> None:
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

    async def run_once(self) -> tuple[set[int], set[int]]:
        """One tick; returns (gained, lost) shards."""
        now = self._now()
        cfg = self.config
        started = time.monotonic()

        async def tick(tx: Store) -> dict[int, int]:
            await tx.shard_leases.heartbeat_member(self.owner, cfg.ttl_s, now)
            renewed = await tx.shard_leases.renew(self.owner, cfg.ttl_s, now)
            held = {h.shard_id: h.revision for h in renewed}
            members = await tx.shard_leases.live_members(now)
            target = fair_share(members, self.owner)
            if len(held) > target:
                excess = sorted(held)[target:]
                for shard_id in await tx.shard_leases.release(self.owner, excess):
                    held.pop(shard_id, None)
            elif len(held) < target:
                got = await tx.shard_leases.acquire(self.owner, target - len(held), cfg.ttl_s,
                                                  salt=self._salt, now=now)
                held.update({h.shard_id: h.revision for h in got})
            return held

        held = await self.db.transaction(tick)
        self._valid_until = started + cfg.ttl_s
        gained, lost = self.ownership.replace(held)
        if gained or lost:
            log.info("shard ownership changed", extra={
                "owner": self.owner, "held": len(held), "gained": len(gained), "lost": len(lost)})
        return gained, lost

    def expire_if_stale(self) -> None:
        """No renewal within the TTL (database unreachable): stop acting on any shard."""
        if self.ownership.held and time.monotonic() > self._valid_until:
            log.warning("shard leases presumed expired: no renewal within the TTL",
                        extra={"owner": self.owner})
            self.ownership.replace({})

    async def sweep(self) -> None:
        now = self._now()
        await self.db.transaction(lambda tx: tx.shard_leases.sweep_members(MEMBER_SWEEP_GRACE_S, now))

    async def release_all(self) -> list[int]:
        """Graceful shutdown: hand every shard back and leave the membership at once."""
        held = sorted(self.ownership.held)
        self.ownership.replace({})

        async def leave(tx: Store) -> list[int]:
            released = await tx.shard_leases.release(self.owner, held)
            await tx.shard_leases.leave(self.owner)
            return released

        released = await self.db.transaction(leave)
        log.info("shards released", extra={"owner": self.owner, "released": len(released)})
        return released

    async def renew_in_time(self) -> tuple[set[int], set[int]]:
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
