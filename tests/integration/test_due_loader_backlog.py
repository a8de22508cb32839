"""The loader on an overdue backlog: each page reads a short range of every shard's primary key (its cost
is what it returns, not the backlog), and every row is read once however unevenly the shards hold them.
Against the embedded PostgreSQL."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import text

from app.domain.shards import SHARD_COUNT, shard_of
from app.scheduler.loader import LoaderConfig
from app.store.db import Database
from tests import factories
from tests.integration.test_hot_statement_plans import _generic_plan
from tests.integration.test_scheduler_duties import T0, ManualClock, new_tenant, node

EPOCH = "1970-01-01 00:00:00+00"


def _array(values: list[object]) -> str:
    return "{" + ",".join(f'"{v}"' for v in values) + "}"


async def test_a_window_page_reads_only_the_rows_it_returns_however_large_the_backlog(db: Database) -> None:
    tenant = await new_tenant(db)

    async def backlog(tx) -> None:  # 20,000 overdue rows over every shard, no job behind them
        await tx.schema._conn.execute(
            text(
                "INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at) "
                "SELECT g % 256, date_trunc('minute', x.at), x.at, gen_random_uuid(), CAST(:tenant AS UUID), x.at "
                "FROM generate_series(1, 20000) AS g "
                "CROSS JOIN LATERAL (SELECT CAST(:t0 AS TIMESTAMPTZ) - g * interval '100 milliseconds' AS at) AS x"
            ),
            {"tenant": str(tenant), "t0": T0},
        )

    await db.transaction(backlog)
    await db.transaction(lambda tx: tx.planner_statistics.analyze("due_index"))
    shards = list(range(SHARD_COUNT))
    nodes = await _generic_plan(
        db,
        "DueIndexLoadShards",
        {
            "shard_ids": _array(shards),
            "after_minutes": _array([EPOCH] * SHARD_COUNT),
            "after_run_ats": _array([EPOCH] * SHARD_COUNT),
            "after_job_ids": _array([uuid.UUID(int=0)] * SHARD_COUNT),
            "until": T0,
            "per_shard": 4,
            "limit": 1000,
            "after_run_at": None,  # the one keyset cursor of the statement before (not read now)
            "after_job_id": None,
        },
        analyze=True,
    )
    scans = [n for n in nodes if n.get("Relation Name") == "due_index"]
    assert scans and all(n["Node Type"] != "Seq Scan" for n in scans), [n["Node Type"] for n in scans]
    read = sum(n["Actual Rows"] * n["Actual Loops"] for n in scans)
    assert read <= SHARD_COUNT * 4, read  # each shard's next four rows, not the 20,000


async def test_the_window_scan_reads_an_uneven_backlog_once_in_bounded_ticks(db: Database) -> None:
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(
        db, clock, "a", loader=LoaderConfig(window_interval_s=0, page_rows=300, max_rows_per_tick=300, near_limit=20)
    )
    await a.leaser.run_once()
    # One shard holds most of the backlog: its cursor walks it page after page after the others ended.
    hog: list[uuid.UUID] = []
    while len(hog) < 900:
        job_id = uuid.uuid4()
        if shard_of(job_id) == 7:
            hog.append(job_id)
    job_ids = hog + [uuid.uuid4() for _ in range(600)]
    await seed_ids(db, tenant, job_ids)
    added = 0
    for _ in range(50):
        result = await a.loader.run_once()
        assert result.read <= 300 + 20  # the window's page budget and the near scan
        added += result.added
        if result.window_done:
            break
    assert result.window_done
    assert len(a.heap) == added == len(job_ids)
    popped = a.heap.pop_due(clock.wall().timestamp(), 10_000)
    assert sorted(e.job_id for e in popped) == sorted(job_ids)


async def seed_ids(db: Database, tenant: uuid.UUID, job_ids: list[uuid.UUID]) -> None:
    """Active one-off jobs with these ids and their due rows, overdue by up to an hour (a second apart)."""
    jobs = []
    for i, job_id in enumerate(job_ids):
        at = T0 - timedelta(hours=1) + timedelta(seconds=(i * 7) % len(job_ids))
        jobs.append(
            factories.SeedJob(
                job_id=job_id,
                tenant_id=tenant,
                shard_id=shard_of(job_id),
                name=f"job-{i}",
                pool="work",
                queue=factories.tenant_queue(tenant, "work"),
                schedule_kind="once",
                nominal_at=at,
                next_run_at=at,
            )
        )
    await factories.raw(db, lambda c: factories.seed_jobs(c, jobs))
