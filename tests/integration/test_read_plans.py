"""The REST API's reads stay flat as history grows: each is a range of an index that fits it, in the
generic plan psycopg runs after a statement's fifth call (docs/database-at-scale.md).

The seeded database is small, so PostgreSQL would rightly read it whole: sequential scans are made
the last resort (enable_seqscan off), which leaves one only where no index can serve the read. And
a read must touch a bounded number of rows of jobs and executions: a page, a window, never a
tenant's whole history. Against the embedded PostgreSQL."""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from app.api.stats import service as stats_service
from app.api.viewer import Viewer
from app.domain.shards import SHARD_COUNT
from app.store.db import Database, create_engine
from app.store.queries import text_for
from tests import factories as tf
from tests.integration.test_hot_statement_plans import _literal, _nodes, _numbered

JOBS = 400  # of each tenant, each with HISTORY executions over 30 days
HISTORY = 24
RECENT = JOBS // 5  # jobs with an occurrence in the last hour
PAGE = 51
COUNTED = 5  # GET /v1/jobs/{id} counts a job's newest executions only (here 5 of its 25)
WEEKS = 12  # weekly partitions of the seeded history: a scan of each may read one row past the limit

# Jobs created over 60 days, each with an execution every 30 hours back from two hours ago, one dead
# in ten; then one occurrence in the last ten minutes for one job in five. Attempts for every
# execution.
SEED = """
WITH made AS (
    INSERT INTO jobs (job_id, tenant_id, name, target_type, target_ref, queue, payload, schedule_kind, cron,
                      cron_resolved, tz, max_attempts, backoff_s, max_backoff_s, timeout_s, state, labels,
                      created_at, updated_at)
    SELECT gen_random_uuid(), CAST(:tenant_id AS UUID), 'job-' || g, 'queue', 'pool', CAST(:queue AS TEXT),
           '{}', 'cron', '0 * * * *', '0 * * * *', 'UTC', 3, 10, 3600, 300, 'active',
           CASE WHEN g % 2 = 0 THEN jsonb_build_object('team', 'team' || (g % 7)) ELSE '{}' END,
           now() - interval '60 days' + g * interval '1 hour', now()
    FROM generate_series(1, :jobs) AS g
    RETURNING job_id, tenant_id, queue, name
)
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                        dispatched_at, started_at, finished_at, error)
SELECT m.job_id, m.tenant_id, m.queue, t, 1, 3, CASE WHEN k % 10 = 0 THEN 'dead' ELSE 'succeeded' END, t, t,
       t + interval '1 second', t + interval '2 seconds', CASE WHEN k % 10 = 0 THEN 'failed' END
FROM made AS m
CROSS JOIN LATERAL (SELECT k, now() - interval '2 hours' - k * interval '30 hours' AS t
                    FROM generate_series(0, :history - 1) AS k
                    UNION ALL
                    SELECT -1, now() - interval '5 minutes' WHERE right(m.name, 1) IN ('0', '5')) AS h
"""
ATTEMPTS = """
INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at, outcome,
                      scheduled_for)
SELECT execution_id, 1, tenant_id, 'w', started_at, started_at + interval '30 seconds', finished_at,
       CASE WHEN state = 'dead' THEN 'failed' ELSE 'succeeded' END, scheduled_for
FROM executions
"""
# Each job's next occurrence: half of them (200 of a tenant's 400) due in the next six hours, the
# rest later, so the due histogram of one tenant must not read the other's rows nor its own later ones.
DUE = """
INSERT INTO due_index (shard_id, due_minute, next_run_at, job_id, tenant_id, nominal_at)
SELECT abs(hashtext(CAST(j.job_id AS TEXT))) % 256, m, m, j.job_id, j.tenant_id, m
FROM (SELECT job_id, tenant_id, row_number() OVER (PARTITION BY tenant_id ORDER BY job_id) AS g FROM jobs) AS j
CROSS JOIN LATERAL (SELECT date_trunc('minute', now()) + interval '1 minute'
                           + (CASE WHEN j.g % 2 = 0 THEN j.g % 6 ELSE 7 + j.g % 12 END) * interval '1 hour' AS m) AS d
"""
HISTORY_TABLES = ("jobs", "executions", "attempts")
# What the due histogram may read: a tenant's due rows of the horizon, never every tenant's.
DUE_TABLES = ("due_index",)
DUE_HORIZON = JOBS // 2
DUE_BOUND = {"due histogram, a tenant": DUE_HORIZON, "due histogram, the operator": 2 * DUE_HORIZON}

# Rows of jobs, executions and attempts a read may touch: a page of jobs (with, per job, its newest
# settled execution and whether one is open: a walk of that job's history), a page of a job's history
# (and its attempts), or the occurrences of the last hour (and theirs); never a tenant's 400 jobs nor
# its 10,000 executions.
JOB_PAGE = PAGE * (HISTORY + 3)
HISTORY_PAGE = 3 * PAGE + 2
WINDOW = 3 * RECENT + PAGE


async def _seed(db: Database) -> tuple[UUID, UUID]:
    """Two tenants' jobs and history, analyzed; the first tenant's id and one of its jobs."""
    tenants = [await tf.tenant(db, "lived-a"), await tf.tenant(db, "lived-b")]

    async def seed(conn: Any) -> UUID:
        for t in tenants:
            await conn.execute(
                text(SEED),
                {
                    "tenant_id": t.tenant_id,
                    "queue": tf.tenant_queue(t.tenant_id, "pool"),
                    "jobs": JOBS,
                    "history": HISTORY,
                },
            )
        await conn.execute(text(ATTEMPTS))
        await conn.execute(text(DUE))
        return (
            await conn.execute(
                text("SELECT job_id FROM jobs WHERE tenant_id = :t LIMIT 1"), {"t": tenants[0].tenant_id}
            )
        ).scalar_one()

    async def analyze(conn: Any) -> None:
        await conn.execute(text("ANALYZE jobs, executions, attempts, tenants, due_index"))

    await tf.raw(db, weekly_history)
    job_id = await tf.raw(db, seed)
    await tf.raw(db, analyze)
    return tenants[0].tenant_id, job_id


async def weekly_history(conn: Any) -> None:
    """History in its weekly partitions, as on an installation partitioned for longer than the history
    kept: the fresh database's cutover (this week's Monday) moves back before the seeded history."""
    await conn.execute(text("SELECT kairos_history_recut(kairos_history_week(now() - interval '62 days'))"))


async def _plan(db: Database, name: str, params: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    """The nodes of the plan ``mode`` (force_generic_plan: what psycopg's prepared statement runs
    from its sixth call on; force_custom_plan: its first calls) under EXPLAIN ANALYZE, sequential
    scans the last resort."""
    sql, names = _numbered(text_for(name, "postgresql"))
    values = ", ".join(_literal(params[n]) for n in names)

    async def explain(tx: Any) -> Any:
        conn = tx.schema._conn
        await conn.execute(text(f"SET LOCAL plan_cache_mode = {mode}"))
        await conn.execute(text("SET LOCAL enable_seqscan = off"))
        await conn.execute(text("PREPARE lived_read AS " + sql.replace(":", "\\:")))
        try:
            rows = await conn.execute(text(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE lived_read({values})"))
            return rows.scalar_one()
        finally:
            await conn.execute(text("DEALLOCATE lived_read"))

    async def parents(tx: Any) -> dict[str, str]:
        rows = await tx.schema._conn.execute(
            text(
                "SELECT c.relname, p.relname FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
                "JOIN pg_class AS p ON p.oid = i.inhparent"
            )
        )
        return {r[0]: r[1] for r in rows.all()}

    doc = await db.transaction(explain)
    doc = json.loads(doc) if isinstance(doc, str) else doc
    nodes = list(_nodes(doc[0]["Plan"]))
    # A partition of executions or attempts (a week, or the default one) is read as its table.
    parent = await db.transaction(parents)
    for n in nodes:
        if n.get("Relation Name") in parent:
            n["Partition"], n["Relation Name"] = n["Relation Name"], parent[n["Relation Name"]]
    return nodes


def _reads(tenant_id: UUID, job_id: UUID) -> list[tuple[str, str, dict[str, Any], int]]:
    """(read, statement, parameters, rows it may touch): what GET /v1/jobs, /v1/jobs/{id}, its
    executions, /v1/dead-letters, /v1/stats/* and /v1/status run."""
    t = str(tenant_id)
    window = {"now": None, "window_s": 3600.0, "limit": 1440}
    due = {
        "now": None,
        "horizon_s": 21600.0,
        "limit": 1440,
        "shard_ids": "{" + ",".join(map(str, range(SHARD_COUNT))) + "}",
    }
    listing = {
        "tenant_id": t,
        "limit": PAGE,
        "scan_limit": PAGE,
        "state": None,
        "name": None,
        "name_prefix": None,
        "labels": None,
        "selectors": None,
        "after_created": None,
        "after_id": None,
    }
    out: list[tuple[str, str, dict[str, Any], int]] = [
        ("jobs, first page", "JobList", listing, JOB_PAGE),
        (
            "jobs, a later page",
            "JobList",
            {**listing, "after_created": "2000-01-02T00:00:00Z", "after_id": "ffffffff-ffff-ffff-ffff-ffffffffffff"},
            JOB_PAGE,
        ),
        ("jobs by label", "JobList", {**listing, "labels": '{"team": "team3"}'}, JOB_PAGE * 7),
        ("one job", "JobGet", {"tenant_id": t, "job_id": str(job_id)}, HISTORY + 3),
        (
            "one job's execution counts",
            "ExecutionCountsForJobNewest",
            {"tenant_id": t, "job_id": str(job_id), "newest": COUNTED},
            COUNTED + WEEKS,
        ),
        (
            "a job's history",
            "ExecutionListForJob",
            {"tenant_id": t, "job_id": str(job_id), "limit": PAGE, "before_scheduled": None},
            HISTORY_PAGE,
        ),
        (
            "a job's history, a later page",
            "ExecutionListForJob",
            {"tenant_id": t, "job_id": str(job_id), "limit": PAGE, "before_scheduled": "2100-01-01T00:00:00Z"},
            HISTORY_PAGE,
        ),
        (
            "dead letters",
            "ExecutionListDead",
            {"tenant_id": t, "job_id": None, "limit": PAGE, "before_finished": None, "before_id": None},
            HISTORY_PAGE,
        ),
        ("queue depths", "StatsQueueDepth", {"tenant_id": t, "now": None, "limit": 500}, WINDOW),
        ("due histogram, a tenant", "StatsDueHistogram", {**due, "tenant_id": t}, WINDOW),
        ("due histogram, the operator", "StatsDueHistogram", {**due, "tenant_id": None}, WINDOW * 2),
    ]
    for who, scope, tenants in (("a tenant", t, 1), ("the operator", None, 2)):
        out += [
            (
                f"start lag per minute, {who}",
                "StatsStartLagPerMinute",
                {"tenant_id": scope, **window},
                WINDOW * tenants,
            ),
            (f"outcomes per minute, {who}", "StatsOutcomesPerMinute", {"tenant_id": scope, **window}, WINDOW * tenants),
            (f"start lag summary, {who}", "StatsStartLagSummary", {"tenant_id": scope, **window}, WINDOW * tenants),
            (f"dead-letter count, {who}", "StatsDeadLetterCount", {"tenant_id": scope, "cap": 1000}, 1001),
        ]
    return out


@pytest.fixture
async def seeded(db: Database) -> tuple[UUID, UUID]:
    return await _seed(db)


@pytest.mark.parametrize("mode", ["force_generic_plan", "force_custom_plan"])
@pytest.mark.parametrize("read", [r[0] for r in _reads(UUID(int=0), UUID(int=0))])
async def test_a_read_is_a_range_of_an_index_not_a_walk_of_history(
    db: Database, seeded: tuple[UUID, UUID], read: str, mode: str
) -> None:
    [(_, name, params, bound)] = [r for r in _reads(*seeded) if r[0] == read]
    nodes = await _plan(db, name, params, mode)
    seq = [n["Relation Name"] for n in nodes if n["Node Type"] == "Seq Scan" and n["Relation Name"] in HISTORY_TABLES]
    assert not seq, f"{name} reads {seq} whole"
    touched = sum(
        n["Actual Rows"] * n["Actual Loops"]
        for n in nodes
        if n.get("Relation Name") in HISTORY_TABLES and "Scan" in n["Node Type"]
    )
    assert touched <= bound, f"{name} touched {touched} rows of jobs, executions and attempts"
    due = sum(  # read, not kept: a filter's rejects count (they are the rows of other tenants)
        (n["Actual Rows"] + n.get("Rows Removed by Filter", 0)) * n["Actual Loops"]
        for n in nodes
        if n.get("Relation Name") in DUE_TABLES and "Scan" in n["Node Type"]
    )
    assert due <= DUE_BOUND.get(read, 0), f"{name} touched {due} rows of due_index"


async def test_a_figure_is_planned_once_per_connection(database_url: str, seeded: tuple[UUID, UUID]) -> None:
    """The figures run generic plans prepared at their first execution on a pooled connection
    (app.store.stats.Stats.plan_once): planning one reads every weekly partition's catalogue, so a
    connection that planned each ten times (psycopg prepares at the fifth use, PostgreSQL makes five
    custom plans after that) kept a dashboard's refresh waiting. The connection's own prepare
    threshold is given back for the other routes' statements."""
    tenant_id, _ = seeded
    one = Database(create_engine(database_url, pool_size=1))  # every read on the same connection
    viewer = Viewer(admin=False, tenant_id=tenant_id, tenant_name="lived-a")
    try:
        for _ in range(3):
            await stats_service.start_lag(one, viewer, 60)

        async def prepared(tx: Any) -> tuple[list[Any], Any]:
            conn = tx.schema._conn
            rows = await conn.execute(
                text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE '%window_rows%' AND statement LIKE '%date_trunc%'"
                )
            )
            raw = (await conn.get_raw_connection()).driver_connection
            return [tuple(r) for r in rows.all()], raw.prepare_threshold

        plans, threshold = await one.read(prepared)
    finally:
        await one.close()
    assert plans == [(3, 0)], plans  # prepared at the first call, its generic plan every time
    assert threshold == 5  # psycopg's default, as the connection had it


async def test_the_dead_letter_count_stops_at_ten_thousand(db: Database) -> None:
    """/v1/stats/queues and /v1/status count a tenant's dead letters on every refresh: up to 10,000,
    then "10,000 or more" (``capped``), an index-only range of executions_dead that a tenant's pile of
    dead letters cannot lengthen."""
    tenant = await tf.tenant(db, "dead-pile")

    async def pile(conn: Any) -> None:
        await conn.execute(
            text(
                "INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, "
                "ready_at, finished_at, error) "
                "SELECT gen_random_uuid(), CAST(:t AS UUID), 'q', now() - g * interval '1 second', 3, 3, 'dead', "
                "now() - g * interval '1 second', now() - g * interval '1 second', 'failed' "
                "FROM generate_series(1, 10001) AS g"
            ),
            {"t": tenant.tenant_id},
        )

    await tf.raw(db, pile)
    viewer = Viewer(admin=False, tenant_id=tenant.tenant_id, tenant_name=tenant.name)
    queues = await stats_service.queues(db, viewer)
    assert (queues.dead_letters.count, queues.dead_letters.capped) == (10_000, True)
