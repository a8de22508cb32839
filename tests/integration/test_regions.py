"""Active-passive schedulers across regions (docs/regions.md), one leaser tick at a time.

The primary region's schedulers split the shards; a standby region's hold nothing while the
primary renews, take every shard once the leases have been over for the grace, and hand them
back (when fail-back is on) once a primary-region scheduler has been back for the grace. Time is
a ManualClock, the SQL ``:now`` included, so nothing sleeps.
"""

from __future__ import annotations

from datetime import timedelta

from app.scheduler.leases import LeaserConfig, Ownership, ShardLeaser, ShareTarget, share_target
from app.store.db import Database
from app.store.shard_leases import Member
from tests.integration.test_scheduler_duties import T0, new_tenant, node, rows, seed
from tests.support.clocks import ManualClock

TTL_S = 10.0
GRACE_S = 15.0
PRIMARY, STANDBY = "eu-west", "us-east"


def leaser(db: Database, clock: ManualClock, owner: str, region: str, *, failback: bool = True) -> ShardLeaser:
    config = LeaserConfig(
        ttl_s=TTL_S, region=region, primary_region=PRIMARY, standby_grace_s=GRACE_S, failback=failback
    )
    return ShardLeaser(db, owner, Ownership(), config, clock.wall)


async def run_for(clock: ManualClock, seconds: float, *leasers: ShardLeaser, step_s: float = 2.0) -> None:
    """Advance time in steps, every leaser ticking at each: live processes renew as they would."""
    elapsed = 0.0
    while elapsed < seconds:
        clock.advance(step_s)
        elapsed += step_s
        for one in leasers:
            await one.run_once()


async def regions_of_live_leases(db: Database, clock: ManualClock) -> dict[str | None, int]:
    leases = await db.transaction(lambda tx: tx.shard_leases.list_all())
    out: dict[str | None, int] = {}
    for lease in leases:
        if lease.owner is not None and lease.lease_until is not None and lease.lease_until > clock.wall():
            out[lease.region] = out.get(lease.region, 0) + 1
    return out


async def primary_lost_to(db: Database, clock: ManualClock, standby: ShardLeaser) -> ShardLeaser:
    """The primary region's only scheduler holds every shard, then dies; the standby has taken over."""
    primary = leaser(db, clock, "eu-1", PRIMARY)
    await primary.run_once()
    await standby.run_once()
    assert len(primary.ownership.held) == 256
    await run_for(clock, TTL_S + GRACE_S + 2, standby)
    assert len(standby.ownership.held) == 256
    return primary


def test_share_target_follows_the_region_rules() -> None:
    at = T0
    long_ago, just_now = at - timedelta(seconds=GRACE_S + 1), at - timedelta(seconds=1)
    config = LeaserConfig(region=STANDBY, primary_region=PRIMARY, standby_grace_s=GRACE_S)
    eu = Member("eu-1", PRIMARY, long_ago)
    us1, us2 = Member("us-1", STANDBY, long_ago), Member("us-2", STANDBY, just_now)
    # The primary region splits the shards among itself only; standbys do not count.
    primary_config = LeaserConfig(region=PRIMARY, primary_region=PRIMARY)
    assert share_target([eu, us1, us2], at, "eu-1", primary_config) == ShareTarget(256)
    # A standby with the primary back and settled holds nothing (fail-back).
    assert share_target([eu, us1], at, "us-1", config) == ShareTarget(0, GRACE_S, never_owned=False)
    # The primary just returned: not yet; standbys split among themselves, after the grace.
    fresh_eu = Member("eu-2", PRIMARY, just_now)
    assert share_target([fresh_eu, us1, us2], at, "us-1", config) == ShareTarget(128, GRACE_S, never_owned=False)
    # No primary: never-owned shards are free only to a standby that has waited the grace itself.
    assert share_target([us1, us2], at, "us-1", config).never_owned
    assert not share_target([us1, us2], at, "us-2", config).never_owned
    # Without fail-back a standby keeps its share even with the primary back.
    no_failback = LeaserConfig(region=STANDBY, primary_region=PRIMARY, standby_grace_s=GRACE_S, failback=False)
    assert share_target([eu, us1], at, "us-1", no_failback).shards == 256
    # No primary region configured, or no region given: everyone is active, as before regions.
    assert share_target([eu, us1], at, "us-1", LeaserConfig(region=STANDBY)) == ShareTarget(128)
    assert share_target([eu, us1], at, "us-1", LeaserConfig(primary_region=PRIMARY)) == ShareTarget(128)


async def test_a_standby_holds_nothing_while_the_primary_region_renews(db: Database) -> None:
    clock = ManualClock(T0)
    primary, standby = leaser(db, clock, "eu-1", PRIMARY), leaser(db, clock, "us-1", STANDBY)
    await primary.run_once()
    await run_for(clock, 3 * (TTL_S + GRACE_S), primary, standby)
    assert len(primary.ownership.held) == 256
    assert len(standby.ownership.held) == 0
    assert await regions_of_live_leases(db, clock) == {PRIMARY: 256}


async def test_on_a_fresh_installation_the_standby_leaves_the_shards_to_the_primary_region(db: Database) -> None:
    clock = ManualClock(T0)
    standby = leaser(db, clock, "us-1", STANDBY)
    await standby.run_once()  # first, with every shard never owned
    await run_for(clock, GRACE_S / 2, standby)
    assert len(standby.ownership.held) == 0
    primary = leaser(db, clock, "eu-1", PRIMARY)
    await run_for(clock, 2 * GRACE_S, standby, primary)
    assert (len(primary.ownership.held), len(standby.ownership.held)) == (256, 0)


async def test_a_lone_standby_takes_a_never_used_installation_after_the_grace(db: Database) -> None:
    clock = ManualClock(T0)
    standby = leaser(db, clock, "us-1", STANDBY)
    await run_for(clock, GRACE_S - 2, standby)
    assert len(standby.ownership.held) == 0
    await run_for(clock, 4, standby)
    assert len(standby.ownership.held) == 256


async def test_the_standby_takes_over_only_after_the_ttl_and_the_grace_and_fences_the_old_owner(db: Database) -> None:
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    old = node(db, clock, "eu-1", ttl_s=TTL_S)  # a primary-region scheduler without regions set: primary
    standby = leaser(db, clock, "us-1", STANDBY)
    await old.leaser.run_once()
    await seed(db, tenant, 10, T0 + timedelta(seconds=TTL_S + GRACE_S + 30))
    await old.loader.run_once()
    before = dict(old.ownership.held)
    # The primary region is lost: no more renewals. Within TTL + grace the standby waits.
    await run_for(clock, TTL_S + GRACE_S - 2, standby)
    assert len(standby.ownership.held) == 0
    await run_for(clock, 4, standby)
    assert len(standby.ownership.held) == 256
    assert all(standby.ownership.held[s] == before[s] + 1 for s in before)  # a new revision per shard
    assert await regions_of_live_leases(db, clock) == {STANDBY: 256}
    # The old owner wakes and tries to dispatch: the fence refuses every entry.
    clock.advance(30)
    result = await old.dispatcher.run_once()
    assert (result.fenced, result.ready) == (10, 0)
    assert await rows(db, "SELECT 1 FROM executions") == []


async def test_fail_back_once_the_primary_region_has_been_back_for_the_grace(db: Database) -> None:
    clock = ManualClock(T0)
    standby = leaser(db, clock, "us-1", STANDBY)
    await primary_lost_to(db, clock, standby)
    returned = leaser(db, clock, "eu-2", PRIMARY)
    await run_for(clock, GRACE_S - 4, standby, returned)
    assert (len(standby.ownership.held), len(returned.ownership.held)) == (256, 0)
    await run_for(clock, 6, standby, returned)
    assert (len(standby.ownership.held), len(returned.ownership.held)) == (0, 256)
    assert await regions_of_live_leases(db, clock) == {PRIMARY: 256}
    await run_for(clock, 3 * GRACE_S, standby, returned)  # and it stays that way
    assert (len(standby.ownership.held), len(returned.ownership.held)) == (0, 256)


async def test_without_fail_back_the_standby_keeps_the_shards(db: Database) -> None:
    clock = ManualClock(T0)
    standby = leaser(db, clock, "us-1", STANDBY, failback=False)
    await primary_lost_to(db, clock, standby)
    returned = leaser(db, clock, "eu-2", PRIMARY)
    await run_for(clock, 3 * GRACE_S, standby, returned)
    assert (len(standby.ownership.held), len(returned.ownership.held)) == (256, 0)
    # Failing back by hand: the standby stops (hands its shards back) and the primary takes them at once.
    await standby.release_all()
    await run_for(clock, 2, returned)
    assert len(returned.ownership.held) == 256


async def test_standbys_rebalance_between_themselves_without_waiting_the_grace(db: Database) -> None:
    clock = ManualClock(T0)
    first = leaser(db, clock, "us-1", STANDBY)
    await primary_lost_to(db, clock, first)
    second = leaser(db, clock, "us-2", STANDBY)
    await run_for(clock, 4, first, second)
    assert (len(first.ownership.held), len(second.ownership.held)) == (128, 128)
    assert await regions_of_live_leases(db, clock) == {STANDBY: 256}
