"""Cron chains through the scheduler, on an injected clock: DST days in America/New_York and
executions that all die.

The clock walks through each day in 20-minute steps; at every step the loader and dispatcher run
once, exactly as their loops would. The fire times must be the ones ARCHITECTURE.md's time rules
demand, and every occurrence that does not run must leave a skipped execution.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from uuid import UUID

import pytest
from sqlalchemy import text

from app.domain import schedule as schedule_rules
from app.domain.shards import shard_of
from app.scheduler.dispatcher import Dispatcher, DispatcherConfig
from app.scheduler.heap import DueHeap
from app.scheduler.leases import LeaserConfig, Ownership, ShardLeaser
from app.scheduler.loader import DueLoader, LoaderConfig
from app.store.db import Database
from tests import factories
from tests.support.clocks import ManualClock

NY = "America/New_York"


def utc(s: str) -> datetime:
    return datetime.fromisoformat(s)


async def seed_cron(
    db: Database, tenant_id: UUID, expr: str, tz: str, after: datetime, *, gap: str = "shift", repeat: str = "once"
) -> UUID:
    job_id = uuid.uuid4()
    first = schedule_rules.next_occurrence(
        schedule_rules.CronSchedule(expr, tz, 0, schedule_rules.DstPolicy(gap, repeat)), after, str(job_id)
    )
    job = factories.SeedJob(
        job_id=job_id,
        tenant_id=tenant_id,
        shard_id=shard_of(job_id),
        name=expr,
        pool="work",
        queue=factories.tenant_queue(tenant_id, "work"),
        schedule_kind="cron",
        nominal_at=first.nominal_utc,
        next_run_at=first.run_at,
        cron=expr,
        tz=tz,
        dst_gap=gap,
        dst_repeat=repeat,
    )
    await factories.raw(db, lambda c: factories.seed_jobs(c, [job]))
    return job_id


async def history(db: Database, job_id: UUID) -> list[tuple[str, str, str | None]]:
    async def read(conn):
        return (
            await conn.execute(
                text(
                    "SELECT scheduled_for, state, skip_reason FROM executions WHERE job_id = :j ORDER BY scheduled_for"
                ),
                {"j": job_id},
            )
        ).all()

    rows = await factories.raw(db, read)
    return [(r.scheduled_for.strftime("%Y-%m-%dT%H:%MZ"), r.state, r.skip_reason) for r in rows]


async def walk(db: Database, start: datetime, end: datetime, step: timedelta, after_step=None) -> None:
    clock = ManualClock(start)
    owner = "cron-test"
    ownership, heap = Ownership(), DueHeap()
    # Leases far longer than the walk: one scheduler that never loses its shards.
    leaser = ShardLeaser(db, owner, ownership, LeaserConfig(ttl_s=30 * 86400), clock.wall)
    loader = DueLoader(db, ownership, heap, LoaderConfig(window_interval_s=0), clock.wall)
    dispatcher = Dispatcher(db, owner, heap, DispatcherConfig(), clock.wall)
    await leaser.run_once()
    while clock.at < end:
        clock.at = min(end, clock.at + step)
        await loader.run_once()
        result = await dispatcher.run_once()
        assert result.fenced == 0 and result.failed == 0
        if after_step is not None:
            await after_step()


@pytest.mark.parametrize("season", ["spring", "fall"])
async def test_dst_days_in_new_york_fire_exactly_as_the_time_rules_demand(db: Database, season: str) -> None:
    tenant, _ = await db.transaction(lambda c: c.tenants.create("dst"))
    t = tenant.tenant_id
    if season == "spring":  # 2026-03-08 02:00 EST -> 03:00 EDT (07:00Z)
        start, end = utc("2026-03-06T12:00Z"), utc("2026-03-09T12:00Z")
    else:  # 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z)
        start, end = utc("2026-10-30T12:00Z"), utc("2026-11-02T12:00Z")
    jobs = {
        "02:30 shift": await seed_cron(db, t, "30 2 * * *", NY, start),
        "02:30 skip": await seed_cron(db, t, "30 2 * * *", NY, start, gap="skip"),
        "01:30 once": await seed_cron(db, t, "30 1 * * *", NY, start),
        "01:30 twice": await seed_cron(db, t, "30 1 * * *", NY, start, repeat="twice"),
        "hourly": await seed_cron(db, t, "0 * * * *", NY, start),
    }
    await walk(db, start, end, timedelta(minutes=20))
    got = {name: await history(db, job_id) for name, job_id in jobs.items()}
    ready = lambda *times: [(x, "ready", None) for x in times]  # noqa: E731
    if season == "spring":
        # 02:30 does not exist on 03-08: shifted to the first instant after the gap (03:00 EDT)...
        assert got["02:30 shift"] == ready("2026-03-07T07:30Z", "2026-03-08T07:00Z", "2026-03-09T06:30Z")
        # ...or, with gap=skip, recorded as skipped so the history explains the missing run.
        assert got["02:30 skip"] == [
            ("2026-03-07T07:30Z", "ready", None),
            ("2026-03-08T07:00Z", "skipped", "dst_gap"),
            ("2026-03-09T06:30Z", "ready", None),
        ]
        assert (
            got["01:30 once"]
            == got["01:30 twice"]
            == ready("2026-03-07T06:30Z", "2026-03-08T06:30Z", "2026-03-09T05:30Z")
        )
    else:
        assert (
            got["02:30 shift"]
            == got["02:30 skip"]
            == ready("2026-10-31T06:30Z", "2026-11-01T07:30Z", "2026-11-02T07:30Z")
        )
        # A fixed hour in the repeated hour runs once, at the first instance (EDT)...
        assert got["01:30 once"] == ready("2026-10-31T05:30Z", "2026-11-01T05:30Z", "2026-11-02T06:30Z")
        # ...or at both with repeat=twice.
        assert got["01:30 twice"] == ready(
            "2026-10-31T05:30Z", "2026-11-01T05:30Z", "2026-11-01T06:30Z", "2026-11-02T06:30Z"
        )
    # A wildcard hour follows elapsed time: every UTC hour exactly once, across either change.
    hours = []
    at = start + timedelta(hours=1)
    while at <= end:
        hours.append(at.strftime("%Y-%m-%dT%H:%MZ"))
        at += timedelta(hours=1)
    assert got["hourly"] == ready(*hours)


async def test_a_cron_chain_survives_executions_that_all_die(db: Database) -> None:
    tenant, _ = await db.transaction(lambda c: c.tenants.create("doomed"))
    start = utc("2026-06-01T12:00:30Z")
    job_id = await seed_cron(db, tenant.tenant_id, "* * * * *", "UTC", start)

    async def kill_everything() -> None:
        async def dead(conn):
            await conn.execute(
                text("UPDATE executions SET state = 'dead', finished_at = now(), error = 'boom' WHERE state = 'ready'")
            )

        await factories.raw(db, dead)

    await walk(db, start, start + timedelta(minutes=10), timedelta(seconds=30), after_step=kill_everything)
    got = await history(db, job_id)
    assert got == [
        ((start + timedelta(minutes=i, seconds=30)).strftime("%Y-%m-%dT%H:%MZ"), "dead", None) for i in range(10)
    ]

    async def due(conn):
        return (await conn.execute(text("SELECT nominal_at FROM due_index WHERE job_id = :j"), {"j": job_id})).all()

    [(nominal,)] = await factories.raw(db, due)
    assert nominal == utc("2026-06-01T12:11:00Z")
