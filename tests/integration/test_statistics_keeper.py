"""StatisticsKeeper against the real database: a burst of writes gets the hot tables analyzed."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

import pytest
from sqlalchemy import text

from app.scheduler.statistics import StatisticsKeeper, StatisticsKeeperConfig
from app.store.db import Database
from tests import factories as tf


async def flush_stats(db: Database) -> None:
    async with db.engine.connect() as conn:
        await conn.execute(text("SELECT pg_stat_force_next_flush()"))


async def analyzed_at(db: Database) -> datetime | None:
    async with db.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT greatest(last_analyze, last_autoanalyze) FROM pg_stat_user_tables"
                    " WHERE relname = 'executions'"
                )
            )
        ).first()
    return row[0] if row else None


async def a_job(db: Database) -> UUID:
    tenant = await tf.tenant(db)
    return await tf.job(db, tenant.tenant_id, queue=tf.tenant_queue(tenant.tenant_id, "p"))


async def burst(db: Database, job: UUID, minute: int = 0, n: int = 2000) -> None:
    """``n`` ready executions of ``job`` (``minute`` minutes back), counted in pg_stat_user_tables at once."""
    first = datetime.now(timezone.utc) - timedelta(seconds=5, minutes=minute)
    await tf.insert_ready(db, [job] * n, [first - timedelta(milliseconds=i) for i in range(n)])
    # The inserting connections report their counts when they flush; make them flush now.
    await db.engine.dispose()
    await flush_stats(db)


async def test_a_burst_of_executions_is_analyzed_once(db: Database) -> None:
    keeper = StatisticsKeeper(db, StatisticsKeeperConfig(min_rows=500, fraction=0.2))
    assert keeper.enabled
    await burst(db, await a_job(db))
    before = await analyzed_at(db)
    result = await keeper.run_once()
    assert "executions" in result.analyzed
    after = await analyzed_at(db)
    assert after is not None and (before is None or after > before)
    await flush_stats(db)
    assert (await keeper.run_once()).analyzed == ()


async def test_only_stale_tables_are_analyzed_and_each_at_most_once_per_gap(db: Database) -> None:
    keeper = StatisticsKeeper(db, StatisticsKeeperConfig(min_rows=500, fraction=0.2, min_gap_s=3600))
    job = await a_job(db)
    for round_ in range(2):
        await burst(db, job, minute=round_)
        # Round 1: executions is stale and analyzed (jobs, one row, is not stale). Round 2: stale
        # again, but analyzed less than min_gap_s ago: left for later.
        assert (await keeper.run_once()).analyzed == (("executions",) if round_ == 0 else ())


async def test_updates_that_leave_a_tables_size_alone_get_no_new_analyze(db: Database) -> None:
    # A herd's drain: every ready execution leased and finished, none added. The plans made for the
    # table after its burst of inserts still fit, and ANALYZE would only cost PostgreSQL's time.
    keeper = StatisticsKeeper(db, StatisticsKeeperConfig(min_rows=500, fraction=0.2, min_gap_s=0))
    job = await a_job(db)
    await burst(db, job)
    assert "executions" in (await keeper.run_once()).analyzed
    async with db.engine.begin() as conn:
        await conn.execute(text("UPDATE executions SET state = 'succeeded', finished_at = now()"))
    await db.engine.dispose()
    await flush_stats(db)
    assert "executions" not in (await keeper.run_once()).analyzed
    # ... but a second burst that doubles it is analyzed again.
    await burst(db, job, minute=1)
    assert "executions" in (await keeper.run_once()).analyzed


async def ready_at_histogram_bounds(db: Database) -> int:
    async with db.engine.connect() as conn:
        row = (
            await conn.execute(
                text(
                    "SELECT cardinality(CAST(CAST(histogram_bounds AS TEXT) AS TEXT[])) FROM pg_stats "
                    "WHERE tablename = 'executions' AND attname = 'ready_at'"
                )
            )
        ).first()
    assert row is not None, "executions.ready_at has no statistics"
    return int(row[0])


@pytest.mark.parametrize("target", [10, 100])
async def test_the_keepers_analyze_uses_its_own_statistics_target(db: Database, target: int) -> None:
    # 2,000 distinct ready_at values: ANALYZE keeps target + 1 histogram bounds of them. The target is
    # this transaction's: the server's default (100) is left alone for autovacuum and everybody else.
    keeper = StatisticsKeeper(db, StatisticsKeeperConfig(min_rows=500, fraction=0.2, target=target))
    await burst(db, await a_job(db))
    assert "executions" in (await keeper.run_once()).analyzed
    assert await ready_at_histogram_bounds(db) == target + 1
    async with db.engine.connect() as conn:
        assert (await conn.execute(text("SHOW default_statistics_target"))).scalar_one() == "100"


@pytest.mark.parametrize(
    "bad", [{"interval_s": 0}, {"min_rows": 0}, {"fraction": -1}, {"target": 0}, {"target": 10_001}]
)
def test_config_is_validated(bad: dict) -> None:
    with pytest.raises(ValueError):
        StatisticsKeeperConfig(**bad)
