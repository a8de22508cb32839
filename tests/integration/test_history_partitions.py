"""History partitioned by week on PostgreSQL: the layout 0022 leaves, the duty that creates weeks ahead
and retires weeks past the retention (archive, detach, drop), and the conversion of a database that
holds history. Against the embedded PostgreSQL.

A fresh database's first weekly partition starts at its cutover: this week's Monday (0039 moves an
empty database's cutover back from the Monday after next, where 0022 puts it and where a database
that held history keeps it); rows before it live in the legacy partitions. These tests write rows
in the weeks from the cutover on, and move the duty's clock with ``now``.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.errors import StoreFailure
from app.executor.retention import RetentionConfig, RetentionPruner, restore
from app.scheduler.partitions import HistoryPartitioner, PartitionerConfig
from app.store import archive, embedded, migrate
from app.store.db import Database, create_engine
from app.store.objects import LocalObjectStore
from app.store.partitions import WEEK, Week
from app.store.seam import Store
from tests import factories as tf
from tests.support.history import recut_as_converted
from tests.support.polling import poll

SEEDED_ROWS = 300_000


async def rows(db: Database, sql: str, **params: Any) -> list[dict[str, Any]]:
    async def read(conn: Any) -> list[dict[str, Any]]:
        result = await conn.execute(text(sql), params)
        return [dict(r._mapping) for r in result] if result.returns_rows else []

    return await tf.raw(db, read)


async def cutover(db: Database) -> datetime:
    [row] = await rows(db, "SELECT cutover FROM history_partitioning")
    cut: datetime = row["cutover"]
    return cut


async def partitions(db: Database, table: str) -> list[str]:
    found = await rows(
        db,
        "SELECT c.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = CAST(:t AS regclass) ORDER BY c.relname",
        t=table,
    )
    return [r["relname"] for r in found]


async def finished_in(
    db: Database, job: UUID, tenant: UUID, queue: str, at: datetime, count: int, *, state: str = "succeeded"
) -> list[UUID]:
    """``count`` executions of ``job`` scheduled from ``at``, one minute apart, finished, each with one attempt."""
    made = await rows(
        db,
        """
        WITH e AS (
            INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                                    started_at, finished_at)
            SELECT :job, :tenant, :queue, :at + g * interval '1 minute', 1, 1, :state, :at + g * interval '1 minute',
                   :at + g * interval '1 minute', :at + g * interval '1 minute' + interval '2 seconds'
            FROM generate_series(0, :n - 1) AS g
            RETURNING execution_id, tenant_id, scheduled_for, started_at, finished_at
        ), a AS (
            INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at,
                                  outcome, scheduled_for)
            SELECT execution_id, 1, tenant_id, 'w1', started_at, started_at + interval '30 seconds', finished_at,
                   CASE WHEN :state = 'succeeded' THEN 'succeeded' ELSE 'failed' END, scheduled_for
            FROM e
        )
        SELECT execution_id FROM e""",
        job=job,
        tenant=tenant,
        queue=queue,
        at=at,
        n=count,
        state=state,
    )
    return [r["execution_id"] for r in made]


async def a_job(db: Database) -> tuple[UUID, UUID, str]:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "history")
    return await tf.job(db, t.tenant_id, queue=queue), t.tenant_id, queue


async def test_history_is_partitioned_by_week_and_an_occurrence_is_unique_in_it(db: Database) -> None:
    first = await cutover(db)
    assert first.weekday() == 0 and (first.hour, first.minute) == (0, 0)
    [week_now] = await rows(db, "SELECT kairos_history_week(now()) AS w")
    assert first == week_now["w"]  # a database with no history starts its weeks at once
    week = first.strftime("%Y%m%d")
    for table in ("executions", "attempts"):
        assert {f"{table}_legacy", f"{table}_p{week}"} <= set(await partitions(db, table))
    job, tenant, queue = await a_job(db)
    at = first + timedelta(days=2)
    [eid] = await tf.insert_ready(db, [job], [at])
    assert await tf.insert_ready(db, [job], [at]) == []  # ON CONFLICT (job_id, scheduled_for): the same occurrence
    [where] = await rows(db, "SELECT CAST(tableoid AS regclass) AS p FROM executions WHERE execution_id = :e", e=eid)
    assert str(where["p"]) == f"executions_p{week}"
    with pytest.raises(IntegrityError):  # the unique index holds in the partition whatever the statement
        await rows(
            db,
            "INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, "
            "ready_at) VALUES (:j, :t, :q, :at, 1, 'ready', :at)",
            j=job,
            t=tenant,
            q=queue,
            at=at,
        )
    # Before the cutover the legacy partition takes the rows, under the same rule.
    [old] = await tf.insert_ready(db, [job], [first - timedelta(days=3)])
    assert await tf.insert_ready(db, [job], [first - timedelta(days=3)]) == []
    [where] = await rows(db, "SELECT CAST(tableoid AS regclass) AS p FROM executions WHERE execution_id = :e", e=old)
    assert str(where["p"]) == "executions_legacy"


async def test_the_duty_creates_the_weeks_ahead_once(db: Database, tmp_path: Path) -> None:
    first = await cutover(db)
    duty = HistoryPartitioner(db, LocalObjectStore(tmp_path), PartitionerConfig(retention_days=0, weeks_ahead=2))
    later = first + 5 * WEEK + timedelta(days=3)
    done = await duty.run_once(now=later)
    assert done.created == 2 * 3  # this week and two ahead, of both tables (the weeks between were never needed)
    assert (await duty.run_once(now=later)).created == 0
    names = set(await partitions(db, "attempts"))
    for n in range(5, 8):
        assert f"attempts_p{(first + n * WEEK).strftime('%Y%m%d')}" in names
    # The weekly partitions carry the legacy partition's autovacuum settings.
    [opts] = await rows(
        db,
        "SELECT reloptions FROM pg_class WHERE relname = :n",
        n=f"executions_p{(first + 5 * WEEK).strftime('%Y%m%d')}",
    )
    assert "autovacuum_vacuum_scale_factor=0.01" in opts["reloptions"]


async def test_a_week_past_the_retention_is_archived_then_dropped_and_a_held_one_stays(
    db: Database, tmp_path: Path
) -> None:
    first = await cutover(db)
    job, tenant, queue = await a_job(db)
    gone = await finished_in(db, job, tenant, queue, first + timedelta(hours=1), 250, state="succeeded")
    dead = await finished_in(db, job, tenant, queue, first + timedelta(days=1), 3, state="dead")
    [late] = await finished_in(db, job, tenant, queue, first + timedelta(days=6), 1)
    await rows(
        db,
        "UPDATE executions SET finished_at = :at WHERE execution_id = :e",
        at=first + WEEK + timedelta(days=2),
        e=late,
    )  # retried into the next week
    held_week = first + WEEK
    await rows(db, "SELECT kairos_history_partitions_ensure(:a, :a)", a=held_week)
    [live] = await tf.insert_ready(db, [job], [held_week + timedelta(hours=5)])
    objects = LocalObjectStore(tmp_path / "objects")
    duty = HistoryPartitioner(db, objects, PartitionerConfig(retention_days=30, batch=100))
    # A row finished within the retention keeps its week, whenever the week ended.
    kept = await duty.run_once(now=first + WEEK + timedelta(days=31))
    assert [(w.week.lo, w.outcome) for w in kept.weeks] == [(first, "held")]

    now = first + 2 * WEEK + timedelta(days=31)
    done = await duty.run_once(now=now)
    assert [(w.week.lo, w.outcome) for w in done.weeks] == [(first, "dropped"), (held_week, "held")]
    retired = done.weeks[0]
    assert (retired.executions, retired.attempts, len(retired.archives)) == (254, 254, 3)
    week = first.strftime("%Y%m%d")
    assert f"executions_p{week}" not in await partitions(db, "executions")
    assert f"attempts_p{week}" not in await partitions(db, "attempts")
    assert await rows(db, "SELECT count(*) AS n FROM executions WHERE job_id = :j", j=job) == [{"n": 1}]
    assert (await rows(db, "SELECT execution_id FROM executions WHERE job_id = :j", j=job))[0]["execution_id"] == live

    archived = [archive.decode(await objects.get(k)) for k in retired.archives]
    in_archives = sorted(e["execution_id"] for a in archived for e in a.executions)
    assert in_archives == sorted(str(i) for i in [*gone, *dead, late])
    assert all(a["scheduled_for"] is not None for x in archived for a in x.attempts)

    # A restore brings the week's partition back and the rows with it; the next pass keeps them a retention.
    back = await restore(db, objects, retired.archives[0])
    assert (back.executions, back.attempts) == (100, 100)
    assert f"executions_p{week}" in await partitions(db, "executions")
    # Restored at the duty's clock (the restore stamps the real one): held for a retention from then.
    await rows(db, "UPDATE executions SET restored_at = :now WHERE restored_at IS NOT NULL", now=now)
    again = await duty.run_once(now=now)
    assert [(w.week.lo, w.outcome) for w in again.weeks] == [(first, "held"), (held_week, "held")]


async def test_the_drop_looks_again_once_detached_and_keeps_a_week_that_changed(db: Database, tmp_path: Path) -> None:
    first = await cutover(db)
    job, tenant, queue = await a_job(db)
    await finished_in(db, job, tenant, queue, first + timedelta(hours=1), 5)
    # A backfill lands in the week after its archive was read: the drop finds it and changes nothing.
    [late] = await tf.insert_ready(db, [job], [first + timedelta(hours=3, seconds=7)])
    cutoff = first + 40 * timedelta(days=1)
    outcome = await db.transaction(lambda tx: tx.partitions.drop(Week(first, first + WEEK), cutoff))
    assert outcome == "held"
    assert await rows(db, "SELECT count(*) AS n FROM executions WHERE job_id = :j", j=job) == [{"n": 6}]
    assert f"executions_p{first.strftime('%Y%m%d')}" in await partitions(db, "executions")
    await rows(db, "DELETE FROM executions WHERE execution_id = :e", e=late)
    assert await db.transaction(lambda tx: tx.partitions.drop(Week(first, first + WEEK), cutoff)) == "dropped"
    assert await db.transaction(lambda tx: tx.partitions.drop(Week(first, first + WEEK), cutoff)) == "absent"


async def test_a_reader_in_the_way_of_the_drop_never_holds_up_executions_for_long(db: Database) -> None:
    """Retiring a week takes its four locks at once or none: while a reader of attempts stands in the way,
    the drop gives up (lock_not_available, after its tries) and statements on executions wait at most
    one try's 200 ms meanwhile, not for the whole of it behind a lock already taken on executions."""
    first = await cutover(db)
    job, tenant, queue = await a_job(db)
    await finished_in(db, job, tenant, queue, first + timedelta(hours=1), 5)
    week, cutoff = Week(first, first + WEEK), first + 40 * timedelta(days=1)
    async with db.engine.connect() as reader:
        await reader.execute(text("SELECT count(*) FROM attempts"))  # its transaction stays open
        drop = asyncio.create_task(db.transaction(lambda tx: tx.partitions.drop(week, cutoff)))
        worst, reads = 0.0, 0
        while not drop.done():
            t0 = time.monotonic()
            await rows(db, "SELECT count(*) AS n FROM executions WHERE job_id = :j", j=job)
            worst, reads = max(worst, time.monotonic() - t0), reads + 1
            await asyncio.sleep(0.02)
        with pytest.raises(StoreFailure) as failed:
            await drop
        assert failed.value.sqlstate == "55P03"
        await reader.rollback()
    assert reads >= 10 and worst < 1.0, (reads, worst)
    assert f"executions_p{first.strftime('%Y%m%d')}" in await partitions(db, "executions")  # nothing changed
    assert await db.transaction(lambda tx: tx.partitions.drop(week, cutoff)) == "dropped"


async def test_the_duty_tries_the_drop_again_once_the_reader_is_gone(db: Database, tmp_path: Path) -> None:
    """Its archives written, the history-partitions duty does not give the week up at the first drop that
    cannot have its locks: it pauses and tries again, and drops the week once the reader has gone."""
    first = await cutover(db)
    job, tenant, queue = await a_job(db)
    await finished_in(db, job, tenant, queue, first + timedelta(hours=1), 5)
    duty = HistoryPartitioner(
        db, LocalObjectStore(tmp_path / "objects"), PartitionerConfig(batch=100, drop_pauses_s=(0.2, 0.5, 1.0, 2.0))
    )
    async with db.engine.connect() as reader:
        await reader.execute(text("SELECT count(*) FROM attempts"))
        retire = asyncio.create_task(duty.retire(Week(first, first + WEEK), first + 40 * timedelta(days=1)))

        async def gave_up_once() -> bool:
            return duty.drop_waits > 0

        await poll(gave_up_once, timeout_s=30, interval_s=0.05, what="the first drop to give up on its locks")
        assert not retire.done()
        await reader.rollback()
    out = await retire
    assert (out.outcome, out.executions) == ("dropped", 5)
    assert f"executions_p{first.strftime('%Y%m%d')}" not in await partitions(db, "executions")


async def test_rows_for_a_week_without_a_partition_get_one(db: Database) -> None:
    """A backfill or a misfire record reaching past the weeks kept, or beyond those created ahead."""
    first = await cutover(db)
    job, tenant, queue = await a_job(db)
    far = first + 9 * WEEK + timedelta(hours=2)
    assert f"executions_p{(first + 9 * WEEK).strftime('%Y%m%d')}" not in await partitions(db, "executions")
    await db.transaction(lambda tx: tx.jobs.record_skipped(job, tenant, queue, 1, [far], "misfire"))
    assert f"executions_p{(first + 9 * WEEK).strftime('%Y%m%d')}" in await partitions(db, "executions")
    assert await rows(db, "SELECT state FROM executions WHERE job_id = :j AND scheduled_for = :at", j=job, at=far) == [
        {"state": "skipped"}
    ]


async def test_the_batched_pruner_leaves_weekly_partitions_to_the_duty(db: Database, tmp_path: Path) -> None:
    """The executors' RetentionPruner (and `kairos history archive --now`) takes from the legacy partitions
    only: a week of a fresh database, however old its rows, leaves whole, by the history-partitions duty."""
    first = await cutover(db)
    job, tenant, queue = await a_job(db)
    ids = await finished_in(db, job, tenant, queue, first + timedelta(hours=1), 5)
    pruner = RetentionPruner(db, LocalObjectStore(tmp_path / "objects"), RetentionConfig())
    assert (await pruner.run_once(now=first + 40 * timedelta(days=1))).key is None
    found = await rows(db, "SELECT execution_id FROM executions WHERE job_id = :j", j=job)
    assert sorted(r["execution_id"] for r in found) == sorted(ids)


# -- a database without history starts its weeks at once (0039) -----------------------------------


def weeks_from_the_start() -> migrate.Migration:
    [m] = [m for m in migrate.available() if m.version == "0039_history_weeks_from_the_start"]
    return m


async def test_history_written_while_the_weeks_move_back_keeps_the_cutover(db: Database) -> None:
    """0039 on an empty database whose cutover is the Monday after next: an execution written before the
    recut could take executions, and committed while it waits, stays where it was written, and so does
    the cutover (the recut's work undone, the migration itself not failed)."""
    await recut_as_converted(db)
    converted = await cutover(db)
    job, tenant, queue = await a_job(db)
    async with db.engine.connect() as writer:
        await writer.execute(  # its transaction stays open: it holds executions against the recut's detach
            text(
                "INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at) "
                "VALUES (:j, :t, :q, now(), 1, 'ready', now())"
            ),
            {"j": job, "t": tenant, "q": queue},
        )
        recut = asyncio.create_task(apply(db, weeks_from_the_start(), record=False))

        async def waiting() -> bool:
            [n] = await rows(
                db, "SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND relation = CAST('executions' AS regclass)"
            )
            return bool(n["n"])

        await poll(waiting, timeout_s=30, interval_s=0.005, what="the recut to wait for executions")
        await writer.commit()
    await asyncio.wait_for(recut, timeout=30)
    assert await cutover(db) == converted
    placed = await rows(db, "SELECT CAST(tableoid AS regclass) AS p FROM executions WHERE job_id = :j", j=job)
    assert [str(r["p"]) for r in placed] == ["executions_legacy"]


async def test_a_reader_in_the_way_of_the_weeks_moving_back_leaves_the_cutover(db: Database) -> None:
    """The recut's locks are waited for at most 200 ms at a time: while a reader holds executions through
    all its tries, 0039 gives up and the cutover stays where 0022 put it. With the tables free it moves."""
    await recut_as_converted(db)
    converted = await cutover(db)
    async with db.engine.connect() as reader:
        await reader.execute(text("SELECT count(*) FROM executions"))  # its transaction stays open
        await asyncio.wait_for(apply(db, weeks_from_the_start(), record=False), timeout=30)
        assert await cutover(db) == converted
        await reader.rollback()
    await apply(db, weeks_from_the_start(), record=False)
    [week_now] = await rows(db, "SELECT kairos_history_week(now()) AS w")
    assert await cutover(db) == week_now["w"] == converted - 2 * WEEK
    names = set(await partitions(db, "executions"))
    assert {f"executions_p{(week_now['w'] + n * WEEK).strftime('%Y%m%d')}" for n in range(3)} <= names


# -- converting a database that holds history ------------------------------------------------------


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


SEED = """
WITH j AS (
    INSERT INTO jobs (job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, run_at,
                      max_attempts, backoff_s, max_backoff_s, timeout_s, state)
    VALUES (gen_random_uuid(), %(tenant_id)s, 'seed', 'queue', 'pool', %(queue)s, '{}', 'once', now(), 3, 10,
            3600, 300, 'completed')
    RETURNING job_id, tenant_id, queue
), e AS (
    INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                            started_at, finished_at)
    SELECT j.job_id, j.tenant_id, j.queue, now() - g * interval '8 second', 1, 3,
           CASE WHEN g %% 100 = 0 THEN 'dead' ELSE 'succeeded' END,
           now() - g * interval '8 second', now() - g * interval '8 second', now() - g * interval '8 second'
    FROM j, generate_series(1, %(rows)s) AS g
    RETURNING execution_id, tenant_id, started_at, state
)
INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at, outcome)
SELECT execution_id, 1, tenant_id, 'w', started_at, started_at + interval '1 minute', started_at,
       CASE WHEN state = 'dead' THEN 'failed' ELSE 'succeeded' END
FROM e
"""
FINGERPRINT = """
SELECT (SELECT count(*) FROM executions) AS executions, (SELECT count(*) FROM attempts) AS attempts,
       (SELECT md5(string_agg(CAST(execution_id AS TEXT) || state || CAST(scheduled_for AS TEXT), ','
                              ORDER BY execution_id)) FROM executions) AS executions_md5,
       (SELECT md5(string_agg(CAST(execution_id AS TEXT) || outcome, ',' ORDER BY execution_id)) FROM attempts)
           AS attempts_md5
"""


async def apply(db: Database, m: migrate.Migration, *, record: bool) -> None:
    """One migration as the runner applies it (recorded in the ledger when ``record``)."""

    async def script(s: Store) -> None:
        await s.schema.run_script(m.script)

    async def claim(s: Store) -> bool:
        return await s.schema.claim(m.version, m.checksum)

    if m.transactional:
        await db.transaction(script)
    else:
        for statement in m.statements():
            await db.outside_transaction(statement)
    if record:
        await db.transaction(claim)


@pytest.fixture
async def seeded_before_partitions(pg_base_url: str) -> Any:
    """A database migrated up to 0020 (exclusive) holding SEEDED_ROWS executions, each with an attempt."""
    name = f"lived_{uuid.uuid4().hex[:10]}"
    admin = _libpq(pg_base_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = embedded.to_sqlalchemy_url(admin, name)
    db = Database(create_engine(url, pool_size=2))
    try:
        await migrate._ensure_table(db)
        for m in migrate.available():
            if m.version < "0020":
                await apply(db, m, record=True)
        tenant_id = uuid.uuid4()
        with psycopg.connect(_libpq(url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO tenants (tenant_id, name, signing_secret) VALUES (%s, 'lived', 'plain')", (tenant_id,)
            )
            conn.execute(
                SEED, {"tenant_id": tenant_id, "queue": tf.tenant_queue(tenant_id, "pool"), "rows": SEEDED_ROWS}
            )
            conn.execute("VACUUM ANALYZE executions")
            conn.execute("VACUUM ANALYZE attempts")
        yield db, url
    finally:
        await db.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_converting_a_database_that_holds_history_keeps_every_row(seeded_before_partitions: Any) -> None:
    db, _url = seeded_before_partitions
    before = await rows(db, FINGERPRINT)
    assert before[0]["executions"] == SEEDED_ROWS
    t0 = time.monotonic()
    applied = await migrate.upgrade(db)
    took = time.monotonic() - t0
    assert applied[:3] == ["0020_attempt_occurrence", "0021_history_partition_functions", "0022_history_partitioned"]
    assert await rows(db, FINGERPRINT) == before, took
    assert await rows(db, "SELECT relkind FROM pg_class WHERE relname IN ('executions', 'attempts')") == [
        {"relkind": "p"},
        {"relkind": "p"},
    ]
    [where] = await rows(db, "SELECT count(*) AS n FROM executions_legacy")
    assert where["n"] == SEEDED_ROWS
    assert await migrate.upgrade(db) == []  # idempotent
    # A new occurrence after the cutover goes to its week; the old history stays where it was.
    first = await cutover(db)
    [week_now] = await rows(db, "SELECT kairos_history_week(now()) AS w")
    assert first == week_now["w"] + 2 * WEEK  # history held rows: 0039 left 0022's cutover where it was
    [row] = await rows(db, "SELECT job_id, tenant_id, queue FROM jobs LIMIT 1")
    [eid] = await tf.insert_ready(db, [row["job_id"]], [first + timedelta(minutes=1)])
    [where] = await rows(db, "SELECT CAST(tableoid AS regclass) AS p FROM executions WHERE execution_id = :e", e=eid)
    assert str(where["p"]) == f"executions_p{first.strftime('%Y%m%d')}"


async def test_the_swap_reads_no_rows_under_its_locks(seeded_before_partitions: Any) -> None:
    """PostgreSQL's own DEBUG messages: the validations scan the tables (under SHARE UPDATE EXCLUSIVE,
    before the swap); the swap builds no index on the old tables and verifies none of their rows: the
    old executions' range and each weekly partition of attempts are proven by the CHECKs."""
    db, url = seeded_before_partitions
    # Apply 0020 and 0021 as the runner does, then 0022 a statement at a time, listening.
    for m in migrate.available():
        if m.version in ("0020_attempt_occurrence", "0021_history_partition_functions"):
            await apply(db, m, record=False)
    [swap_file] = [m for m in migrate.available() if m.version == "0022_history_partitioned"]
    heard: dict[str, list[str]] = {}
    with psycopg.connect(_libpq(url), autocommit=True) as conn:
        current: list[str] = []
        conn.add_notice_handler(lambda d: current.append(d.message_primary or ""))
        conn.execute("SET client_min_messages = debug1")
        for statement in swap_file.statements():
            current.clear()
            conn.execute(statement)
            heard[statement] = list(current)
    swap = heard["SELECT kairos_history_swap()"]
    assert not [m for m in swap if m.startswith("verifying table")], swap
    assert not [m for m in swap if "building index" in m and "_legacy" in m], swap
    implied = [m for m in swap if "is implied by existing constraints" in m]
    assert any('"executions_legacy"' in m for m in implied) and any('"attempts_legacy"' in m for m in implied), swap
    validate = heard["SELECT kairos_history_validate('executions')"]
    assert any(m.startswith('verifying table "executions"') for m in validate), validate


async def test_a_dispatch_into_a_dropped_week_gets_its_partition_back(db: Database) -> None:
    """A catch-up occurrence of a week that retention dropped: the dispatch batch writes it (its week's
    partition comes back first) instead of failing on every retry."""
    from app.domain.states import ExecutionState
    from app.store.dispatch import NewExecution

    now = datetime.now(timezone.utc)
    monday = now.replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(days=now.weekday())
    await rows(db, "SELECT kairos_history_recut(:c)", c=monday - 6 * WEEK)  # weeks from six ago
    gone = monday - 4 * WEEK
    assert await db.transaction(lambda tx: tx.partitions.drop(Week(gone, gone + WEEK), now)) == "dropped"
    job, tenant, queue = await a_job(db)
    at = gone + timedelta(days=2, hours=3)
    fresh = [
        NewExecution(job, tenant, queue, at, 3, ExecutionState.READY, at),
        NewExecution(job, tenant, queue, now - timedelta(seconds=1), 3, ExecutionState.READY, now),
    ]
    done = await db.transaction(lambda tx: tx.dispatch.record(fresh, [], []))
    assert done.ready == 2
    assert f"executions_p{gone.strftime('%Y%m%d')}" in await partitions(db, "executions")
    assert await rows(db, "SELECT count(*) AS n FROM executions WHERE job_id = :j", j=job) == [{"n": 2}]
