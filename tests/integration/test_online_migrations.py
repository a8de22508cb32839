"""Migrations run while Kairos runs: no statement may block writes to a hot table for more than a
second on a database that has lived (the rule in docs/database-at-scale.md).

Each migration from FIRST_ONLINE on is applied to a database migrated up to just before it and
seeded with SEED_ROWS executions, while a writer keeps inserting and settling executions and a
watcher polls pg_locks every few milliseconds for a lock of the migration's that blocks writes
(SHARE and stronger) on a hot table. The time such a lock is held grows with the table, so it is
scaled from the seeded size to LIVED_ROWS (the brief's 20 million executions) before it is held to
the one-second bound. Older migrations were written before the rule (several build indexes or
validate CHECKs under locks that block writes); the table in the doc says what each one costs.
Against the embedded PostgreSQL."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import psycopg
import pytest

from app.store import embedded, migrate
from app.store.db import Database, create_engine
from tests import factories as tf

FIRST_ONLINE = "0015"
SEED_ROWS = 100_000
LIVED_ROWS = 20_000_000
BLOCK_LIMIT_S = 1.0
# Migrations whose write-blocking locks cover catalogue work only, whatever the tables hold: held to the
# bound as measured, not scaled. 0022's swap renames, attaches the old tables as partitions and
# creates weekly partitions, the old tables' rows proven to fit by validated CHECKs (PostgreSQL
# says so: test_history_partitions.py::test_the_swap_reads_no_rows_under_its_locks).
CATALOGUE_ONLY = frozenset({"0022_history_partitioned"})
HOT_TABLES = ("jobs", "due_index", "executions", "attempts", "tenants", "shard_leases")
# Lock modes that conflict with ROW EXCLUSIVE (what INSERT, UPDATE and DELETE take).
BLOCKS_WRITES = ("ShareLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")
APP_NAME = "kairos-online-migration"

SEED = """
WITH j AS (
    INSERT INTO jobs (job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, run_at,
                      max_attempts, backoff_s, max_backoff_s, timeout_s, state)
    VALUES (gen_random_uuid(), %(tenant_id)s, 'seed', 'queue', 'pool', %(queue)s, '{}', 'once', now(), 3, 10,
            3600, 300, 'completed')
    RETURNING job_id, tenant_id, queue
)
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                        started_at, finished_at)
SELECT j.job_id, j.tenant_id, j.queue, now() - g * interval '1 second', 1, 3, 'succeeded',
       now() - g * interval '1 second', now() - g * interval '1 second', now() - g * interval '1 second'
FROM j, generate_series(1, %(rows)s) AS g
"""
WRITE = """
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at)
VALUES (%(job_id)s, %(tenant_id)s, %(queue)s, clock_timestamp(), 3, 'ready', now())
RETURNING execution_id
"""
SETTLE = """
UPDATE executions SET state = 'succeeded', attempt = 1, started_at = now(), finished_at = now()
WHERE execution_id = %(execution_id)s
"""
HELD = """
SELECT c.relname, l.mode FROM pg_locks AS l
JOIN pg_class AS c ON c.oid = l.relation
JOIN pg_stat_activity AS a ON a.pid = l.pid
WHERE a.application_name = %(app)s AND l.granted AND c.relname = ANY(%(tables)s) AND l.mode = ANY(%(modes)s)
"""


def _libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


async def _watch(url: str, stop: asyncio.Event, held: dict[str, float]) -> None:
    """Seconds each (table, mode) that blocks writes was seen held by the migration's connections."""
    async with await psycopg.AsyncConnection.connect(_libpq(url), autocommit=True) as conn:
        last = time.monotonic()
        while not stop.is_set():
            rows = await (
                await conn.execute(HELD, {"app": APP_NAME, "tables": list(HOT_TABLES), "modes": list(BLOCKS_WRITES)})
            ).fetchall()
            now = time.monotonic()
            for table, mode in set(rows):
                held[f"{table} {mode}"] = held.get(f"{table} {mode}", 0.0) + (now - last)
            last = now
            await asyncio.sleep(0.002)


async def _write(url: str, stop: asyncio.Event, job: dict[str, Any], stalls: list[float]) -> None:
    """Insert and settle executions, one short transaction each, until stopped: the worst wait."""
    async with await psycopg.AsyncConnection.connect(_libpq(url), autocommit=True) as conn:
        while not stop.is_set():
            t0 = time.monotonic()
            row = await (await conn.execute(WRITE, job)).fetchone()
            assert row is not None
            await conn.execute(SETTLE, {"execution_id": row[0]})
            stalls.append(time.monotonic() - t0)


@pytest.fixture
async def before_online(pg_base_url: str) -> Any:
    """A database migrated up to FIRST_ONLINE (exclusive) and seeded; its URL and a seeded job."""
    name = f"online_{uuid.uuid4().hex[:10]}"
    admin = _libpq(pg_base_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    url = embedded.to_sqlalchemy_url(admin, name)
    db = Database(create_engine(url, pool_size=2))
    try:
        for m in migrate.available():
            if m.version < FIRST_ONLINE:
                await db.transaction(lambda s, m=m: s.schema.run_script(m.script))
        tenant_id = uuid.uuid4()  # written with the columns the schema has before FIRST_ONLINE
        queue = tf.tenant_queue(tenant_id, "pool")
        with psycopg.connect(_libpq(url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO tenants (tenant_id, name, signing_secret) VALUES (%s, 'online', 'plain')", (tenant_id,)
            )
            conn.execute(SEED, {"tenant_id": tenant_id, "queue": queue, "rows": SEED_ROWS})
            conn.execute("VACUUM ANALYZE executions")
            job_id = conn.execute("SELECT job_id FROM jobs LIMIT 1").fetchone()[0]  # type: ignore[index]
        yield url, {"job_id": job_id, "tenant_id": tenant_id, "queue": queue}
    finally:
        await db.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def _apply(db: Database, m: migrate.Migration) -> None:
    if m.transactional:
        await db.transaction(lambda s: s.schema.run_script(m.script))
    else:
        for statement in m.statements():
            await db.outside_transaction(statement)


async def test_no_new_migration_blocks_writes_for_more_than_a_second_on_a_lived_database(before_online: Any) -> None:
    url, job = before_online
    online = [m for m in migrate.available() if m.version >= FIRST_ONLINE]
    assert online, "no migration under the rule"
    db = Database(create_engine(url, pool_size=2, application_name=APP_NAME))
    report: dict[str, Any] = {}
    try:
        for m in online:
            stop = asyncio.Event()
            held: dict[str, float] = {}
            stalls: list[float] = []
            watcher = asyncio.create_task(_watch(url, stop, held))
            writer = asyncio.create_task(_write(url, stop, job, stalls))
            await asyncio.sleep(0.05)
            t0 = time.monotonic()
            await _apply(db, m)
            took = time.monotonic() - t0
            await asyncio.sleep(0.05)
            stop.set()
            await asyncio.gather(watcher, writer)
            scale = 1.0 if m.version in CATALOGUE_ONLY else LIVED_ROWS / SEED_ROWS
            # Only executions is seeded at scale: a lock on it lasts as its rows do; one on another table
            # (a handful of rows here, and in the brief's tenants table thousands) is kept as measured.
            report[m.version] = {
                "seconds": round(took, 3),
                "writes": len(stalls),
                "worst write s": round(max(stalls, default=0.0), 3),
                "write-blocking locks, s at 20M rows": {
                    k: round(v * (scale if k.startswith("executions ") else 1.0), 2) for k, v in held.items()
                },
            }
    finally:
        await db.close()
    too_long = {
        v: r
        for v, r in report.items()
        if any(s > BLOCK_LIMIT_S for s in r["write-blocking locks, s at 20M rows"].values())
    }
    assert not too_long, too_long
    assert all(r["writes"] > 0 for r in report.values()), report


async def test_hot_tables_carry_their_autovacuum_settings(db: Database) -> None:
    """Partitioned tables hold no storage parameters of their own: each partition of executions and
    attempts carries them (the legacy ones from 0017, the weekly ones copied when created)."""

    async def options(conn: Any) -> dict[str, list[str]]:
        from sqlalchemy import text

        rows = await conn.execute(
            text(
                "SELECT relname, reloptions FROM pg_class "
                "WHERE relname IN ('due_index', 'jobs') "
                "OR relname ~ '^(executions|attempts)_(legacy|p[0-9]{8})$'"
            )
        )
        return {r.relname: list(r.reloptions or []) for r in rows}

    got = await tf.raw(db, options)
    executions = [t for t in got if t.startswith("executions_")]
    attempts = [t for t in got if t.startswith("attempts_")]
    assert len(executions) >= 2 and len(attempts) >= 2, got
    assert all("autovacuum_vacuum_scale_factor=0.01" in got[t] for t in executions), got
    assert all("autovacuum_vacuum_scale_factor=0.05" in got[t] for t in attempts), got
    assert "autovacuum_vacuum_scale_factor=0.02" in got["due_index"], got
    assert got["jobs"], got
