"""Start lag counts scheduled occurrences: a backfill or a manual run, started long after its scheduledFor,
appears neither in kairos_start_lag_seconds nor in the stats the dashboard and `kairos status` read."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from app import observability
from app.executor.batching import Outcomes
from app.store import executions as ex
from app.store.db import Database
from tests import factories as tf


def lag_samples(tenant_id: str) -> int:
    """kairos_start_lag_seconds' count for the tenant, as this process would expose it."""
    for family in text_string_to_metric_families(observability.exposition().decode()):
        if family.name == "kairos_start_lag_seconds":
            return int(
                sum(
                    s.value for s in family.samples if s.name.endswith("_count") and s.labels.get("tenant") == tenant_id
                )
            )
    return 0


async def test_backfills_and_manual_runs_are_left_out_of_start_lag(db: Database) -> None:
    observability.setup_metrics("test")
    t = await tf.tenant(db)
    queue = tf.shared_queue("lag")
    job = await tf.job(db, t.tenant_id, queue=queue)
    now = datetime.now(timezone.utc)
    scheduled = await tf.insert_ready(db, [job] * 3, [now - timedelta(seconds=30 + i) for i in range(3)])
    late = await tf.insert_ready(db, [job] * 4, [now - timedelta(minutes=40 + i) for i in range(4)])

    async def mark(conn) -> None:
        await conn.execute(
            text("UPDATE executions SET trigger = 'backfill' WHERE execution_id = ANY(:b)"), {"b": late[:2]}
        )
        await conn.execute(
            text("UPDATE executions SET trigger = 'manual' WHERE execution_id = ANY(:m)"), {"m": late[2:]}
        )

    await tf.raw(db, mark)
    outcomes = Outcomes(db)
    got = await db.statement(lambda tx: tx.executions.lease(queue, "worker-1", 20, 30.0))
    assert len(got) == 7
    outcomes.track(got, 30.0, queue)
    assert {item.trigger for item in got} == {"schedule", "backfill", "manual"}
    await outcomes.complete_batch([ex.Success(item.execution_id, item.attempt) for item in got])
    assert lag_samples(str(t.tenant_id)) == len(scheduled)

    summary = await db.transaction(lambda tx: tx.stats.start_lag_summary(t.tenant_id, 3600))
    assert (summary.occurrences, summary.started) == (3, 3)
    assert summary.start_p99_ms is not None and summary.start_p99_ms < 60_000  # not the backfill's 40 minutes
    minutes = await db.transaction(lambda tx: tx.stats.start_lag_per_minute(t.tenant_id, 3600))
    assert sum(m.occurrences for m in minutes) == 3
