"""A database that has lived: jobs and 30 days of history loaded into the migrated schema, then reads.

    .venv/bin/python loadtest/lived.py [--scale 1] [--calls 100] [--database-url URL] [--keep]
                                       [--attempts all|failed] [--no-reads] [--no-empty]

Starts a fresh embedded PostgreSQL (pgserver, in a temporary directory; or the server given by
--database-url), creates two databases, migrates both with ``app.store.migrate`` and loads one:

  tenants     1,000 x scale (at least 10), made by the Store like `kairos tenants create`
  jobs        2,000,000 x scale, over the tenants by a Zipf (s = 1) law: tenant i holds a share
              proportional to 1/i, so the largest holds about an eighth of all jobs
              10 % recurring (cron, four fire times a day, in UTC), the rest one-off; 85 % active,
              15 % paused, cancelled or completed (completed: one-off jobs that already ran)
              labels on half (team: one of 50, tier: one of 3); created over the last 60 days
  due_index   one row per active job (its next occurrence), as the submit path leaves it
  executions  every fire time of the last 30 days of each recurring job (about 23,000,000 x scale),
              and the one run of each completed job; 3 % needed a second attempt, 0.5 % are
              dead letters (three failed attempts), the rest succeeded at the first
  attempts    one row per attempt of each execution (--attempts failed: only those of executions
              that needed more than one, which halves the load)

The load is the bench's, not the product's, so it takes the fastest honest route: the job ids and
their shards (crc32 of the UUID, app.domain.shards) are streamed by COPY into a staging table, and
everything else is INSERT ... SELECT over generate_series in the database. The tables' indexes and
unique constraints are dropped first and built again afterwards from their own definitions
(pg_get_indexdef / pg_get_constraintdef), so the schema ends as migrated; VACUUM ANALYZE then leaves
visibility maps and planner statistics as autovacuum would on a database that has lived.

Then, unless --no-reads: a `kairos api` process on each database, and every read the dashboard,
the job pages and `kairos jobs ls` make, --calls times each (sequential, keep-alive), as one table
of p50/p99 per read, lived beside empty. Target: p99 <= 50 ms on the lived database.

Prints the load's size and time; writes the raw figures to loadtest/results/lived-<UTC>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import psycopg  # noqa: E402

from app.domain.schedule import cron  # noqa: E402
from app.store import Store, migrate, sealing  # noqa: E402
from app.store.db import Database, create_engine  # noqa: E402
from loadtest.herd import Processes, Server, free_port, kairos_command, libpq, with_database  # noqa: E402

JOBS_AT_SCALE_1 = 2_000_000
TENANTS_AT_SCALE_1 = 1_000
HISTORY_DAYS = 30
RECURRING = 0.10
FIRES_PER_DAY = 4  # a recurring job fires every 6 hours
RETRIED = 0.03
DEAD = 0.005
POOL = "work"
TABLES = ("jobs", "due_index", "executions", "attempts")
TEAMS = 50
P99_TARGET_MS = 50.0


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument(
        "--scale", type=float, default=1.0, help="1: 2,000,000 jobs over 1,000 tenants (0.05 for a quick run)"
    )
    p.add_argument("--calls", type=int, default=100, help="calls per read (p99 over them)")
    p.add_argument("--cli-calls", type=int, default=20, help="`kairos jobs ls` runs (a process each)")
    p.add_argument("--attempts", choices=("all", "failed"), default="all")
    p.add_argument("--database-url", default=None, help="a PostgreSQL server to use instead of an embedded one")
    p.add_argument("--keep", action="store_true", help="keep the databases (and the embedded server's data)")
    p.add_argument("--no-reads", action="store_true", help="load and report the size only")
    p.add_argument("--no-empty", action="store_true", help="skip the empty database beside the lived one")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--explain",
        type=Path,
        default=None,
        help="write EXPLAIN (ANALYZE, BUFFERS) of every read's statement (its generic plan, as the "
        "API runs it after the fifth call) on the lived database to this file (markdown)",
    )
    return p.parse_args(argv)


# -- the load ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tenant:
    tenant_id: str
    name: str
    key: str
    jobs: int


def zipf_counts(total: int, n: int) -> list[int]:
    """``total`` split over ``n`` by weight 1/i, every share at least 1, summing exactly to ``total``."""
    weights = [1.0 / i for i in range(1, n + 1)]
    s = sum(weights)
    counts = [max(1, int(total * w / s)) for w in weights]
    counts[0] += total - sum(counts)
    return counts


async def make_tenants(db: Database, count: int, total_jobs: int) -> list[Tenant]:
    shares = zipf_counts(total_jobs, count)

    async def work(tx: Store) -> list[Tenant]:
        out = []
        for i, jobs in enumerate(shares):
            created = await tx.tenants.create(f"lived-{i:04d}")
            assert created is not None
            t, key = created
            out.append(Tenant(str(t.tenant_id), t.name, key, jobs))
        return out

    return await db.transaction(work)


# Job kinds, chosen per job in the stream: the SQL below builds every column from them.
KINDS = (
    ("cron", RECURRING * 0.85),
    ("cron_paused", RECURRING * 0.15),
    ("once", 0.90 * 0.85),
    ("once_paused", 0.90 * 0.05),
    ("cancelled", 0.90 * 0.05),
    ("completed", 0.90 * 0.05),
)


def job_stream(tenants: list[Tenant], seed: int) -> io.BytesIO:
    """COPY text of (job_id, tenant_id, shard_id, kind, minute, hour, labelled, team, tier, n)."""
    rnd = random.Random(seed)
    names = [k for k, _ in KINDS]
    weights = [w for _, w in KINDS]
    buf = io.StringIO()
    n = 0
    for t in tenants:
        kinds = rnd.choices(names, weights, k=t.jobs)
        for kind in kinds:
            job_id = uuid.UUID(int=rnd.getrandbits(128), version=4)
            shard = zlib.crc32(job_id.bytes) % 256
            labelled = rnd.random() < 0.5
            buf.write(
                f"{job_id}\t{t.tenant_id}\t{shard}\t{kind}\t{rnd.randrange(60)}\t{rnd.randrange(6)}\t"
                f"{'t' if labelled else 'f'}\t{rnd.randrange(TEAMS)}\t{rnd.randrange(3)}\t{n}\n"
            )
            n += 1
    return io.BytesIO(buf.getvalue().encode())


def cron_resolved_of() -> dict[str, str]:
    out = {}
    for m in range(60):
        for h in range(6):
            expr = f"{m} {h},{h + 6},{h + 12},{h + 18} * * *"
            out[expr] = cron.validate_cron(expr, "lived")
    return out


STAGE = """
CREATE UNLOGGED TABLE lived_stage (
    job_id UUID, tenant_id UUID, shard_id INT, kind TEXT, m INT, h INT, labelled BOOL, team INT, tier INT, n INT8)
"""

# Every column of jobs, as the submit path and the state changes leave them. `now` is the load's
# clock; a recurring job's fire times are h:m, h+6:m, h+12:m and h+18:m UTC.
JOBS = """
INSERT INTO jobs (
    job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, run_at, cron, cron_resolved,
    tz, jitter_s, dst_gap, dst_repeat, max_attempts, backoff_s, max_backoff_s, timeout_s, concurrency, misfire,
    state, next_nominal_at, next_run_at, first_run_at, paused_at, version, idempotency_key, request_hash,
    created_at, updated_at, start_at, end_at, every_s, anchor_at, labels, dry_run, max_retry_duration_s,
    http_method, http_headers, traceparent, payload_ref)
SELECT s.job_id, s.tenant_id,
       CASE WHEN s.kind LIKE 'cron%%' THEN 'report-' ELSE 'task-' END || s.n,
       'queue', %(pool)s, 'tenant:' || s.tenant_id || ':' || %(pool)s,
       jsonb_build_object('n', s.n, 'kind', s.kind),
       CASE WHEN s.kind LIKE 'cron%%' THEN 'cron' ELSE 'once' END,
       CASE WHEN s.kind LIKE 'cron%%' THEN NULL ELSE x.run_at END,
       CASE WHEN s.kind LIKE 'cron%%' THEN x.expr END,
       CASE WHEN s.kind LIKE 'cron%%' THEN (%(resolved)s::jsonb) ->> x.expr END,
       CASE WHEN s.kind LIKE 'cron%%' THEN 'UTC' END,
       0, 'shift', 'once', 3, 10, 3600, 300, 'allow', 'run_once',
       CASE s.kind WHEN 'cron_paused' THEN 'paused' WHEN 'once_paused' THEN 'paused'
                   WHEN 'cancelled' THEN 'cancelled' WHEN 'completed' THEN 'completed' ELSE 'active' END,
       CASE WHEN s.kind IN ('cron', 'cron_paused') THEN x.next_fire
            WHEN s.kind IN ('once', 'once_paused') THEN x.run_at END,
       CASE WHEN s.kind IN ('cron', 'cron_paused') THEN x.next_fire
            WHEN s.kind IN ('once', 'once_paused') THEN x.run_at END,
       CASE WHEN s.kind LIKE 'cron%%' THEN x.created + interval '6 hours' ELSE x.run_at END,
       CASE WHEN s.kind LIKE '%%paused' THEN %(now)s - interval '1 hour' END,
       CASE WHEN s.kind IN ('cron', 'once', 'completed') THEN 1 ELSE 2 END,
       NULL, NULL, x.created,
       CASE WHEN s.kind IN ('cron', 'once', 'completed') THEN x.created ELSE %(now)s - interval '1 hour' END,
       NULL, NULL, NULL, NULL,
       CASE WHEN s.labelled THEN jsonb_build_object('team', 'team' || s.team,
                                                     'tier', (ARRAY['gold', 'silver', 'bronze'])[s.tier + 1])
            ELSE '{}'::jsonb END,
       false, NULL, 'POST', '{}'::jsonb, NULL, NULL
FROM lived_stage AS s
CROSS JOIN LATERAL (
    SELECT s.m || ' ' || s.h || ',' || (s.h + 6) || ',' || (s.h + 12) || ',' || (s.h + 18) || ' * * *' AS expr,
           -- created 30 to 60 days ago (a recurring job: before the history starts), newest n last
           %(now)s - interval '60 days' + (s.n * 30.0 / %(total)s) * interval '1 day' AS created,
           -- the next fire time after now
           date_trunc('day', %(now)s) + (s.h * 60 + s.m) * interval '1 minute'
             + ceil(greatest(0, extract(epoch FROM %(now)s - date_trunc('day', %(now)s)
                                                  - (s.h * 60 + s.m) * interval '1 minute') + 1) / 21600.0)
               * interval '6 hours' AS next_fire,
           -- one-off: ahead (up to 30 days) when still to run, behind (the last 30 days) once completed
           CASE WHEN s.kind = 'completed'
                THEN %(now)s - interval '30 days' + ((s.n * 7919) %% 2592000) * interval '1 second'
                ELSE %(now)s + interval '1 minute' + ((s.n * 7919) %% 2592000) * interval '1 second' END AS run_at
) AS x
"""

DUE = """
INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
SELECT s.shard_id, date_trunc('minute', j.next_run_at), j.next_run_at, j.job_id, j.tenant_id, j.next_nominal_at
FROM lived_stage AS s JOIN jobs AS j ON j.job_id = s.job_id
WHERE j.state = 'active'
"""

# r decides the outcome: below DEAD a dead letter after three failed attempts, below DEAD + RETRIED a
# success at the second attempt, else at the first. Attempts are 15 s apart (the backoff).
EXECUTIONS = """
INSERT INTO executions (
    execution_id, job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
    dispatched_at, started_at, finished_at, error, result, trigger)
SELECT gen_random_uuid(), o.job_id, o.tenant_id, o.queue, o.t, o.tries, 3,
       CASE WHEN o.r < %(dead)s THEN 'dead' ELSE 'succeeded' END,
       o.t + (o.tries - 1) * interval '15 seconds', o.t - interval '1 second',
       o.t + (o.tries - 1) * interval '15 seconds' + interval '300 milliseconds',
       o.t + (o.tries - 1) * interval '15 seconds' + interval '1300 milliseconds',
       CASE WHEN o.r < %(dead)s THEN 'handler failed: exit status 1' END,
       NULL, 'schedule'
FROM (
    SELECT f.job_id, f.tenant_id, f.queue, f.t, f.r,
           CASE WHEN f.r < %(dead)s THEN 3 WHEN f.r < %(dead)s + %(retried)s THEN 2 ELSE 1 END AS tries
    FROM (
        SELECT j.job_id, j.tenant_id, j.queue, t, random() AS r
        FROM jobs AS j
        CROSS JOIN LATERAL generate_series(
            date_trunc('day', %(now)s) - %(days)s * interval '1 day'
              + (split_part(j.cron, ' ', 1)::int * 60 + split_part(split_part(j.cron, ' ', 2), ',', 1)::int)
                * interval '1 minute',
            coalesce(j.paused_at, %(now)s) - interval '1 minute', interval '6 hours') AS g (t)
        WHERE j.schedule_kind = 'cron' AND t > %(now)s - %(days)s * interval '1 day'
        UNION ALL
        SELECT j.job_id, j.tenant_id, j.queue, j.run_at, random()
        FROM jobs AS j WHERE j.state = 'completed'
    ) AS f
) AS o
"""

ATTEMPTS = """
INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at, outcome,
                      error, result, scheduled_for)
SELECT e.execution_id, a, e.tenant_id, 'worker-' || (a %% 4),
       e.scheduled_for + (a - 1) * interval '15 seconds' + interval '300 milliseconds',
       e.scheduled_for + (a - 1) * interval '15 seconds' + interval '30300 milliseconds',
       e.scheduled_for + (a - 1) * interval '15 seconds' + interval '1300 milliseconds',
       CASE WHEN a < e.attempt OR e.state = 'dead' THEN 'failed' ELSE 'succeeded' END,
       CASE WHEN a < e.attempt OR e.state = 'dead' THEN 'handler failed: exit status 1' END, NULL, e.scheduled_for
FROM executions AS e CROSS JOIN LATERAL generate_series(1, e.attempt) AS g (a)
WHERE %(all)s OR e.attempt > 1
"""


def weekly_history(conn: psycopg.Connection, now: datetime) -> None:
    """On PostgreSQL's partitioned history: an installation partitioned for longer than the history
    kept holds every loaded week in its weekly partition. The fresh database's cutover (this week's
    Monday) moves back before the history (kairos_history_recut, migration 0021)."""
    row = conn.execute("SELECT to_regproc('kairos_history_recut') IS NOT NULL").fetchone()
    if row and row[0]:
        conn.execute(
            "SELECT kairos_history_recut(kairos_history_week(%s - %s * interval '1 day'))", (now, HISTORY_DAYS + 1)
        )


@dataclass
class Definitions:
    """The indexes and unique constraints of the loaded tables, dropped before the load and built after."""

    constraints: list[tuple[str, str, str]] = field(default_factory=list)  # table, name, definition
    indexes: list[str] = field(default_factory=list)  # CREATE INDEX statements
    index_names: list[str] = field(default_factory=list)


def take_definitions(conn: psycopg.Connection) -> Definitions:
    d = Definitions()
    rows = conn.execute(
        "SELECT c.relname, i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid), k.conname, "
        "pg_get_constraintdef(k.oid) FROM pg_index AS i JOIN pg_class AS c ON c.oid = i.indrelid "
        "LEFT JOIN pg_constraint AS k ON k.conindid = i.indexrelid AND k.contype IN ('p', 'u') "
        "WHERE c.relname = ANY(%s) ORDER BY c.relname, 2",
        (list(TABLES),),
    ).fetchall()
    for table, index, indexdef, conname, condef in rows:
        if conname:
            d.constraints.append((table, conname, condef))
        else:
            d.indexes.append(indexdef)
            d.index_names.append(index)
    return d


def drop(conn: psycopg.Connection, d: Definitions) -> None:
    for name in d.index_names:
        # CASCADE: a partitioned table's index takes its partitions' with it (and the fresh default
        # partition's unique constraints, which the rebuild makes unique indexes of, on empty tables).
        conn.execute(f"DROP INDEX {name} CASCADE")
    for table, name, _ in d.constraints:
        conn.execute(f"ALTER TABLE {table} DROP CONSTRAINT {name}")


def rebuild(conn: psycopg.Connection, d: Definitions) -> None:
    for table, name, definition in d.constraints:
        conn.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for statement in d.indexes:
        # A partitioned table's index reads "ON ONLY t": built on the table and every partition instead.
        conn.execute(statement.replace(" ON ONLY ", " ON ", 1))


@dataclass
class Loaded:
    url: str
    tenants: list[Tenant]
    seconds: dict[str, float]
    rows: dict[str, int]
    size_bytes: int


def timed(seconds: dict[str, float], name: str, work: Callable[[], Any]) -> Any:
    t0 = time.monotonic()
    out = work()
    seconds[name] = round(time.monotonic() - t0, 1)
    print(f"  {name}: {seconds[name]} s", flush=True)
    return out


async def load(url: str, args: argparse.Namespace) -> Loaded:
    total = max(100, int(JOBS_AT_SCALE_1 * args.scale))
    tenant_count = max(10, int(TENANTS_AT_SCALE_1 * args.scale))
    seconds: dict[str, float] = {}
    t0 = time.monotonic()
    db = Database(create_engine(url, pool_size=2))
    try:
        await migrate.upgrade(db)
        tenants = await make_tenants(db, tenant_count, total)
    finally:
        await db.close()
    seconds["tenants"] = round(time.monotonic() - t0, 1)
    now = datetime.now(timezone.utc).replace(microsecond=0)
    params = {
        "pool": POOL,
        "now": now,
        "total": total,
        "resolved": json.dumps(cron_resolved_of()),
        "dead": DEAD,
        "retried": RETRIED,
        "days": HISTORY_DAYS,
        "all": args.attempts == "all",
    }
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '512MB'")
        conn.execute("SET synchronous_commit = off")
        weekly_history(conn, now)
        defs = take_definitions(conn)
        drop(conn, defs)
        conn.execute(STAGE)
        stream = timed(seconds, "generate job ids", lambda: job_stream(tenants, args.seed))

        def copy() -> None:
            with conn.cursor() as cur, cur.copy("COPY lived_stage FROM STDIN") as cp:
                while chunk := stream.read(1 << 20):
                    cp.write(chunk)

        timed(seconds, "copy job ids", copy)
        timed(seconds, "jobs", lambda: conn.execute(JOBS, params))
        timed(seconds, "due_index", lambda: conn.execute(DUE, params))
        timed(seconds, "executions", lambda: conn.execute(EXECUTIONS, params))
        timed(seconds, "attempts", lambda: conn.execute(ATTEMPTS, params))
        conn.execute("DROP TABLE lived_stage")
        timed(seconds, "indexes", lambda: rebuild(conn, defs))
        timed(seconds, "vacuum analyze", lambda: [conn.execute(f"VACUUM ANALYZE {t}") for t in (*TABLES, "tenants")])
        rows = {t: int(conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]) for t in TABLES}  # type: ignore[index]
        size = int(conn.execute("SELECT pg_database_size(current_database())").fetchone()[0])  # type: ignore[index]
    seconds["total"] = round(time.monotonic() - t0, 1)
    return Loaded(url, tenants, seconds, rows, size)


async def empty(url: str, tenant_count: int) -> Loaded:
    db = Database(create_engine(url, pool_size=2))
    try:
        await migrate.upgrade(db)
        tenants = await make_tenants(db, tenant_count, tenant_count)
    finally:
        await db.close()
    return Loaded(url, tenants, {}, {}, 0)


# -- the plans ---------------------------------------------------------------------------------------


def statement_reads(conn: psycopg.Connection, tenant_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(read, statement, parameters) of the REST reads, for the largest tenant, with cursors deep in."""
    job_id = conn.execute(
        "SELECT job_id FROM jobs WHERE tenant_id = %s AND schedule_kind = 'cron' ORDER BY created_at LIMIT 1",
        (tenant_id,),
    ).fetchone()[0]  # type: ignore[index]
    page100 = conn.execute(
        "SELECT created_at, job_id FROM jobs WHERE tenant_id = %s "
        "ORDER BY created_at DESC, job_id DESC OFFSET 4999 LIMIT 1",
        (tenant_id,),
    ).fetchone()
    before = conn.execute(
        "SELECT scheduled_for FROM executions WHERE job_id = %s ORDER BY scheduled_for DESC OFFSET 97 LIMIT 1",
        (job_id,),
    ).fetchone()
    listing = {
        "tenant_id": tenant_id,
        "limit": 51,
        "scan_limit": 51,
        "state": None,
        "name": None,
        "name_prefix": None,
        "labels": None,
        "after_created": None,
        "after_id": None,
    }
    window = {"now": None, "window_s": 3600.0, "limit": 1440}
    due = {"now": None, "horizon_s": 21600.0, "limit": 1440, "shard_ids": list(range(256))}
    out: list[tuple[str, str, dict[str, Any]]] = [
        ("GET /v1/jobs (first page)", "JobList", listing),
        (
            "GET /v1/jobs (100th page)",
            "JobList",
            {**listing, "after_created": page100[0] if page100 else None, "after_id": page100[1] if page100 else None},
        ),
        ("GET /v1/jobs?label=team:team7", "JobList", {**listing, "labels": json.dumps({"team": "team7"})}),
        ("GET /v1/jobs/{id}", "JobGet", {"tenant_id": tenant_id, "job_id": job_id}),
        (
            "GET /v1/jobs/{id} (counts)",
            "ExecutionCountsForJobNewest",
            {"tenant_id": tenant_id, "job_id": job_id, "newest": 1000},
        ),
        (
            "GET /v1/jobs/{id}/executions (first page)",
            "ExecutionListForJob",
            {"tenant_id": tenant_id, "job_id": job_id, "limit": 51, "before_scheduled": None},
        ),
        (
            "GET /v1/jobs/{id}/executions (50th page)",
            "ExecutionListForJob",
            {"tenant_id": tenant_id, "job_id": job_id, "limit": 3, "before_scheduled": before[0] if before else None},
        ),
        (
            "GET /v1/dead-letters",
            "ExecutionListDead",
            {"tenant_id": tenant_id, "job_id": None, "limit": 51, "before_finished": None, "before_id": None},
        ),
        ("GET /v1/stats/queues", "StatsQueueDepth", {"tenant_id": tenant_id, "now": None, "limit": 500}),
        ("GET /v1/stats/queues (dead letters)", "StatsDeadLetterCount", {"tenant_id": tenant_id, "cap": 10_000}),
        ("GET /v1/stats/due", "StatsDueHistogram", {"tenant_id": tenant_id, **due}),
        ("GET /v1/stats/due (operator, every tenant)", "StatsDueHistogram", {"tenant_id": None, **due}),
        ("GET /v1/stats/lag", "StatsStartLagPerMinute", {"tenant_id": tenant_id, **window}),
        ("GET /v1/stats/lag (operator, every tenant)", "StatsStartLagPerMinute", {"tenant_id": None, **window}),
        ("GET /v1/stats/outcomes", "StatsOutcomesPerMinute", {"tenant_id": tenant_id, **window}),
        (
            "GET /v1/status (start lag, 5 minutes)",
            "StatsStartLagSummary",
            {"tenant_id": tenant_id, **window, "window_s": 300.0},
        ),
    ]
    return out


def explain(conn: psycopg.Connection, name: str, params: dict[str, Any]) -> str:
    """EXPLAIN (ANALYZE, BUFFERS) of a catalogue statement in its generic plan (PREPARE + EXECUTE)."""
    from psycopg import sql

    from app.store.queries import text_for

    order: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m.group(1) not in order:
            order.append(m.group(1))
        return f"${order.index(m.group(1)) + 1}"

    body = re.sub(r"(?<![:\w]):([A-Za-z_]\w*)", number, text_for(name, "postgresql")).rstrip().rstrip(";")
    conn.execute(f"PREPARE lived_read AS {body}")
    conn.execute("SET plan_cache_mode = force_generic_plan")
    args = ", ".join(sql.Literal(params.get(n)).as_string(conn) for n in order)
    rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS) EXECUTE lived_read({args})").fetchall()
    conn.execute("RESET plan_cache_mode")
    conn.execute("DEALLOCATE lived_read")
    return "\n".join(r[0] for r in rows)


def explain_all(url: str, tenant_id: str) -> str:
    out = []
    with psycopg.connect(libpq(url), autocommit=True, prepare_threshold=None) as conn:
        for read, name, params in statement_reads(conn, tenant_id):
            explain(conn, name, params)  # once to warm the cache, as a dashboard refreshing would
            out.append(f"#### {read}: `{name}`\n\n```\n{explain(conn, name, params)}\n```\n")
    return "\n".join(out)


# -- the reads ---------------------------------------------------------------------------------------


@dataclass
class Read:
    name: str
    p50_ms: float | None = None
    p99_ms: float | None = None
    calls: int = 0
    error: str | None = None


class Api:
    """A `kairos api` process on one database, and a keep-alive client with the largest tenant's key."""

    def __init__(self, procs: Processes, loaded: Loaded, label: str, home: Path) -> None:
        self.port = free_port()
        self.loaded = loaded
        self.tenant = loaded.tenants[0]  # the largest: where a read costs most
        env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
        env.update(
            {
                "KAIROS_HOME": str(home),
                "KAIROS_DATABASE_URL": loaded.url,
                "KAIROS_API_PORT": str(self.port),
                "KAIROS_API_HOST": "127.0.0.1",
                "KAIROS_LOG_LEVEL": "warning",
                sealing.SECRET_KEY_VARIABLE: os.environ[sealing.SECRET_KEY_VARIABLE],
            }
        )
        self.env = env
        self.proc = procs.start(f"lived-{label}-api", [*kairos_command(), "api"], env)
        self.base = f"http://127.0.0.1:{self.port}"
        self.client = httpx.AsyncClient(
            base_url=self.base, timeout=30.0, headers={"Authorization": f"Bearer {self.tenant.key}"}
        )

    async def ready(self, timeout_s: float = 60.0) -> None:
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.popen.poll() is not None:
                raise RuntimeError(f"kairos api exited:\n{self.proc.tail()}")
            try:
                if (await self.client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.2)
        raise RuntimeError("kairos api not ready")

    async def get(self, path: str, params: dict[str, Any] | None = None) -> httpx.Response:
        r = await self.client.get(path, params=params)
        if r.status_code != 200:
            raise RuntimeError(f"GET {path} {params}: {r.status_code} {r.text[:200]}")
        return r


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def measure(name: str, calls: int, call: Callable[[], Awaitable[Any]]) -> Read:
    await call()  # warm: the first call of a route plans its statements and fills caches
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await call()
        times.append((time.perf_counter() - t0) * 1000)
    return Read(name, round(statistics.median(times), 1), round(pct(times, 0.99), 1), calls)


REFRESH_WARM = 5  # the dashboard's first refreshes, a row of their own (p99: the slowest of them)


async def walk_jobs(api: Api, pages: int, params: dict[str, Any]) -> str | None:
    """The cursor of page ``pages`` (1-based) of a jobs listing, None when it has fewer pages."""
    cursor = None
    for _ in range(pages - 1):
        body = (await api.get("/v1/jobs", {**params, **({"cursor": cursor} if cursor else {})})).json()
        cursor = body.get("nextCursor")
        if not cursor:
            return None
    return cursor


async def reads(api: Api, args: argparse.Namespace) -> list[Read]:
    n = args.calls
    out: list[Read] = []

    async def add(name: str, call: Callable[[], Awaitable[Any]]) -> None:
        try:
            out.append(await measure(name, n, call))
        except Exception as exc:  # noqa: BLE001 - one read failing must not hide the others
            out.append(Read(name, error=str(exc).splitlines()[0][:80]))

    await add("GET /v1/jobs (first page, 50)", lambda: api.get("/v1/jobs", {"limit": 50}))
    cursor = await walk_jobs(api, 100, {"limit": 50})
    if cursor:
        await add("GET /v1/jobs (100th page by cursor)", lambda: api.get("/v1/jobs", {"limit": 50, "cursor": cursor}))
    else:
        out.append(Read("GET /v1/jobs (100th page by cursor)", error="fewer than 100 pages"))
    await add("GET /v1/jobs?label=team:team7", lambda: api.get("/v1/jobs", {"limit": 50, "label": "team:team7"}))
    await add(
        "GET /v1/jobs?label=team:team7&label=tier:gold",
        lambda: api.get("/v1/jobs", {"limit": 50, "label": ["team:team7", "tier:gold"]}),
    )
    first = (await api.get("/v1/jobs", {"limit": 1, "namePrefix": "report-"})).json()["jobs"]
    if not first:  # the empty database: a job of its own to read
        r = await api.client.post(
            "/v1/jobs",
            json={
                "name": "report-0",
                "target": {"type": "queue", "ref": POOL},
                "schedule": {"cron": "0 */6 * * *", "tz": "UTC"},
            },
        )
        first = [r.json()]
    job_id = first[0]["jobId"]
    await add("GET /v1/jobs/{id} (recurring job)", lambda: api.get(f"/v1/jobs/{job_id}"))
    await add(
        "GET /v1/jobs/{id}/executions (first page, 50)", lambda: api.get(f"/v1/jobs/{job_id}/executions", {"limit": 50})
    )
    hist = f"/v1/jobs/{job_id}/executions"
    page: str | None = None
    for _ in range(49):  # a job's 50th page: at 2 a page, 100 executions back (the lived job holds ~120)
        r = await api.get(hist, {"limit": 2, **({"cursor": page} if page else {})})
        page = httpx.URL(r.links["next"]["url"]).params.get("cursor") if "next" in r.links else None
        if not page:
            break
    if page:
        fiftieth = page
        await add(
            "GET /v1/jobs/{id}/executions (50th page by cursor, 2)",
            lambda: api.get(hist, {"limit": 2, "cursor": fiftieth}),
        )
    else:
        out.append(Read("GET /v1/jobs/{id}/executions (50th page by cursor, 2)", error="fewer than 50 pages"))
    await add("GET /v1/dead-letters (first page)", lambda: api.get("/v1/dead-letters"))
    for path, params in (
        ("/v1/stats/lag", {"minutes": 60}),
        ("/v1/stats/outcomes", {"minutes": 60}),
        ("/v1/stats/queues", None),
        ("/v1/stats/due", {"hours": 6}),
        ("/v1/status", None),
    ):
        await add(f"GET {path}", functools.partial(api.get, path, params))

    def refresh() -> Awaitable[Any]:
        """The dashboard's refresh (app/api/web/dashboard.js): its calls at once."""
        return asyncio.gather(
            api.get("/v1/status"),
            api.get("/v1/stats/lag", {"minutes": 60}),
            api.get("/v1/stats/outcomes", {"minutes": 60}),
            api.get("/v1/stats/due", {"hours": 6}),
        )

    # The refresh's calls at once take more pooled connections than the calls one after another did;
    # each statement is planned once on each (app.store.stats.Stats.plan_once). The first refreshes,
    # while they do, are a row of their own; a dashboard refreshing every few seconds runs on warm ones.
    first = []
    for _ in range(REFRESH_WARM):
        t0 = time.perf_counter()
        await refresh()
        first.append((time.perf_counter() - t0) * 1000)
    out.append(
        Read(
            f"dashboard refresh, the first {REFRESH_WARM} (warming)",
            round(statistics.median(first), 1),
            round(max(first), 1),
            REFRESH_WARM,
        )
    )
    await add("dashboard refresh (the four calls at once)", refresh)
    out.append(await cli_jobs_ls(api, args.cli_calls))
    return out


async def cli_jobs_ls(api: Api, calls: int) -> Read:
    """`kairos jobs ls`: a process each call, so most of its time is the interpreter starting."""
    env = dict(api.env, KAIROS_API_URL=api.base, KAIROS_API_KEY=api.tenant.key)
    argv = [*kairos_command(), "jobs", "ls"]
    times = []
    for _ in range(calls + 1):
        t0 = time.perf_counter()
        done = await asyncio.to_thread(subprocess.run, argv, env=env, capture_output=True, timeout=60)
        if done.returncode != 0:
            return Read("kairos jobs ls", error=done.stderr.decode(errors="replace").strip()[:80])
        times.append((time.perf_counter() - t0) * 1000)
    times = times[1:]
    return Read(
        "kairos jobs ls (a process per call)", round(statistics.median(times), 1), round(pct(times, 0.99), 1), calls
    )


def print_table(lived: list[Read], blank: list[Read] | None) -> None:
    by_name = {r.name: r for r in blank or []}
    head = f"{'read':58} {'lived p50':>10} {'lived p99':>10} {'empty p50':>10} {'empty p99':>10}  p99<=50ms"
    print(head)
    print("-" * len(head))

    def cell(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f}"

    for r in lived:
        e = by_name.get(r.name)
        if r.error:
            print(f"{r.name:58} error: {r.error}")
            continue
        untargeted = r.name.startswith("kairos ") or "(warming)" in r.name
        ok = "" if untargeted else ("yes" if (r.p99_ms or 0) <= P99_TARGET_MS else "NO")
        print(
            f"{r.name:58} {cell(r.p50_ms):>10} {cell(r.p99_ms):>10} {cell(e.p50_ms if e else None):>10} "
            f"{cell(e.p99_ms if e else None):>10}  {ok}"
        )


async def main(args: argparse.Namespace) -> int:
    os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())
    tmp = Path(tempfile.mkdtemp(prefix="kairos-lived-"))
    (tmp / "logs").mkdir()
    server = Server(argparse.Namespace(database_url=args.database_url, keep=args.keep), tmp)
    procs = Processes(tmp / "logs")
    results: dict[str, Any] = {"scale": args.scale, "attempts": args.attempts}
    try:
        lived_url = server.create("lived")
        print(f"loading scale {args.scale} into {lived_url.partition('?')[0].rsplit('/', 1)[1]}", flush=True)
        lived = await load(lived_url, args)
        gb = lived.size_bytes / 1e9
        print(
            f"loaded {lived.rows} over {len(lived.tenants)} tenants in {lived.seconds['total']} s; "
            f"database size {gb:.2f} GB",
            flush=True,
        )
        results.update(
            {
                "loadSeconds": lived.seconds,
                "rows": lived.rows,
                "sizeBytes": lived.size_bytes,
                "tenants": len(lived.tenants),
                "largestTenantJobs": lived.tenants[0].jobs,
            }
        )
        if args.explain:
            args.explain.write_text(explain_all(lived_url, lived.tenants[0].tenant_id))
            print(f"plans written to {args.explain}", flush=True)
        if not args.no_reads:
            blank_reads = None
            if not args.no_empty:
                blank = await empty(server.create("empty"), len(lived.tenants))
                api = Api(procs, blank, "empty", tmp / "home")
                await api.ready()
                blank_reads = await reads(api, args)
                await api.client.aclose()
            api = Api(procs, lived, "lived", tmp / "home")
            await api.ready()
            lived_reads = await reads(api, args)
            await api.client.aclose()
            print_table(lived_reads, blank_reads)
            results["reads"] = {
                "lived": [r.__dict__ for r in lived_reads],
                "empty": [r.__dict__ for r in blank_reads or []],
            }
        out = ROOT / "loadtest" / "results" / f"lived-{datetime.now(timezone.utc):%Y%m%dT%H%M%SZ}.json"
        out.write_text(json.dumps(results, indent=2, default=str))
        print(f"figures in {out.relative_to(ROOT)}")
        return 0
    finally:
        procs.stop(grace_s=5)
        for name in server.created:  # on --database-url's server (an embedded one goes as a whole)
            if args.database_url and not args.keep:
                server.drop(with_database(server.url, name))
        server.close()


def entry() -> int:
    return asyncio.run(main(parse()))


if __name__ == "__main__":
    sys.exit(entry())
