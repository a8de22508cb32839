"""The executor's hot statements keep index plans in the form psycopg runs them after their fifth call:
prepared, with PostgreSQL's generic plan, which counts an array parameter as 10 elements and a
LIMIT parameter at a tenth of the rows. Against the embedded PostgreSQL."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from app.store.db import Database
from app.store.queries import text_for
from tests import factories as tf
from tests.support.history import recut_as_converted


def _numbered(sql: str) -> tuple[str, list[str]]:
    """The named statement with $1.. for its :names (each name once, in order of first use)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        if match.group(1) not in names:
            names.append(match.group(1))
        return f"${names.index(match.group(1)) + 1}"

    return re.sub(r"(?<![:\w]):(\w+)(?!:)", number, sql), names


def _literal(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)):
        return str(value)
    return "'" + str(value).replace("'", "''") + "'"


def _nodes(plan: dict[str, Any]):
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


async def _generic_plan(
    db: Database, name: str, params: dict[str, Any], *, analyze: bool = False
) -> list[dict[str, Any]]:
    """The generic plan's nodes; with ``analyze`` the statement runs (and commits) under EXPLAIN ANALYZE."""
    sql, names = _numbered(text_for(name, "postgresql"))
    values = ", ".join(_literal(params[n]) for n in names)

    async def explain(tx):
        conn = tx.schema._conn
        await conn.execute(text("SET LOCAL plan_cache_mode = force_generic_plan"))
        await conn.execute(text("PREPARE hot_statement AS " + sql.replace(":", "\\:")))
        try:
            options = "ANALYZE, FORMAT JSON" if analyze else "FORMAT JSON"
            rows = await conn.execute(text(f"EXPLAIN ({options}) EXECUTE hot_statement({values})"))
            return rows.scalar_one()
        finally:
            await conn.execute(text("DEALLOCATE hot_statement"))

    async def parents(tx):
        rows = await tx.schema._conn.execute(
            text(
                "SELECT c.relname, p.relname, pg_relation_size(c.oid) = 0 FROM pg_inherits AS i "
                "JOIN pg_class AS c ON c.oid = i.inhrelid JOIN pg_class AS p ON p.oid = i.inhparent"
            )
        )
        return {r[0]: (r[1], r[2]) for r in rows.all()}

    doc = await db.transaction(explain)
    doc = json.loads(doc) if isinstance(doc, str) else doc
    nodes = list(_nodes(doc[0]["Plan"]))
    # History is partitioned by week on PostgreSQL: a partition's scan is named after its table and the
    # table's index, the partition kept in "Partition". A weekly partition created ahead holds no page
    # yet: the planner scans such a one sequentially (it reads nothing), and it is left out here.
    parent = await db.transaction(parents)
    kept = []
    for n in nodes:
        if n.get("Relation Name") in parent:
            table, empty = parent[n["Relation Name"]]
            if empty and n["Node Type"] == "Seq Scan":
                continue
            n["Partition"] = n["Relation Name"]
            n["Relation Name"] = table
        if n.get("Index Name") in parent:
            n["Index Name"] = parent[n["Index Name"]][0]
        kept.append(n)
    return kept


async def _ready_queue(db: Database, n: int) -> tuple[str, list[UUID]]:
    """A tenant's queue holding ``n`` ready executions of one job: the queue and their ids."""
    tenant = await tf.tenant(db, "acme")
    queue = tf.tenant_queue(tenant.tenant_id, "pool")
    job = await tf.job(db, tenant.tenant_id, queue=queue)
    return queue, await tf.ready_executions(db, job, n)


async def test_the_lease_never_scans_executions_while_the_tenants_table_was_never_analyzed(db: Database) -> None:
    # A deployment with fewer than 50 tenants: autovacuum never analyzes tenants, and the statistics
    # keeper analyzes executions once a burst of executions lands. The generic plan then took the
    # picked rows for thousands and joined them to a scan of every ready execution.
    queue, _ = await _ready_queue(db, 5_000)
    await db.transaction(lambda tx: tx.planner_statistics.analyze("executions"))

    nodes = await _generic_plan(
        db,
        "ExecutionLeaseFair",
        {
            "queue": queue,
            "worker_id": "w",
            "limit": 128,
            "lease_s": 60.0,
            "now": None,
            "salt": "ab",
            "skip_tenants": "{}",
        },
    )
    scans = [n["Node Type"] for n in nodes if n.get("Relation Name") == "executions"]
    assert scans and "Seq Scan" not in scans, scans


async def test_the_lease_counts_each_tenants_leased_rows_once(db: Database) -> None:
    # Through a herd's drain the count visits about a thousand rows, live and recently finished; as a
    # subquery of the select list it ran once for the quota filter and again for the LIMIT.
    queue, _ = await _ready_queue(db, 500)
    nodes = await _generic_plan(
        db,
        "ExecutionLeaseFair",
        {
            "queue": queue,
            "worker_id": "w",
            "limit": 128,
            "lease_s": 60.0,
            "now": None,
            "salt": "ab",
            "skip_tenants": "{}",
        },
        analyze=True,
    )
    counts = [n for n in nodes if n.get("Index Name") == "executions_leased_by_queue"]
    # Once per partition of executions (an index scan each).
    assert counts and all(n["Actual Loops"] == 1 for n in counts), [(n["Node Type"], n["Actual Loops"]) for n in counts]
    assert len({n.get("Partition") for n in counts}) == len(counts)


async def test_the_completion_joins_no_two_ctes_by_nested_loop(db: Database) -> None:
    # Quadratic in the batch: 261,632 rows compared in the final join of a 512-item call (34 ms, not 7).
    _queue, ids = await _ready_queue(db, 3)
    array = "{" + ",".join(map(str, ids)) + "}"
    nodes = await _generic_plan(
        db,
        "ExecutionCompleteMany",
        {
            "execution_ids": array,
            "attempts": "{1,1,1}",
            "results": "{NULL,NULL,NULL}",
            "scopes": "{NULL,NULL,NULL}",
            "sent_ats": "{NULL,NULL,NULL}",
            "scheduled_fors": "{NULL,NULL,NULL}",
            "now": None,
        },
    )
    loops = [
        n
        for n in nodes
        if n["Node Type"] == "Nested Loop" and [c["Node Type"] for c in n.get("Plans", [])] == ["CTE Scan", "CTE Scan"]
    ]
    assert not loops, [[c.get("CTE Name") for c in n["Plans"]] for n in loops]


def _leased_update(nodes: list[dict[str, Any]]) -> dict[str, Any]:
    [update] = [n for n in nodes if n["Node Type"] == "ModifyTable" and n.get("Relation Name") == "executions"]
    return update


@pytest.mark.parametrize("converted", [False, True], ids=["weekly partitions", "legacy partition"])
@pytest.mark.parametrize("analyzed", [False, True], ids=["executions never analyzed", "executions analyzed"])
async def test_the_lease_finds_the_rows_it_updates_by_primary_key_whatever_the_statistics(
    db: Database, analyzed: bool, converted: bool
) -> None:
    # With executions never analyzed, the update read the whole ready index into a bitmap (every ready
    # row of the queue) and scanned the picked rows once per row: 13.9 ms for 128 of 60,000, not 4.8.
    # A fresh database holds the queue in this week's partition; one converted while it held history,
    # in the legacy partition for its first weeks. With 5,000 rows never analyzed in a weekly partition,
    # beside the empty partitions ahead (each costed at ten pages until analyzed), the generic plan's
    # costs put one hash join over sequential scans (202) below ten probes of every partition (221);
    # from 10,000 rows the probes win, and the update's cost per row is what this test is about.
    if converted:
        await recut_as_converted(db)
    queue, _ = await _ready_queue(db, 20_000)
    if analyzed:
        await db.transaction(lambda tx: tx.planner_statistics.analyze("executions", target=10))
    nodes = await _generic_plan(
        db,
        "ExecutionLeaseFair",
        {
            "queue": queue,
            "worker_id": "w",
            "limit": 128,
            "lease_s": 60.0,
            "now": None,
            "salt": "ab",
            "skip_tenants": "{}",
        },
    )
    below = list(_nodes(_leased_update(nodes)))[1:]
    reads = [(n["Node Type"], n.get("Index Name")) for n in below if n.get("Relation Name") == "executions"]
    # Each partition by its row identity: the legacy partition's own primary key, or the occurrence key.
    assert reads and set(reads) <= {("Index Scan", "executions_pkey"), ("Index Scan", "executions_occurrence_key")}, (
        reads
    )
    loops = [n for n in below if n["Node Type"] == "Nested Loop" and n["Plans"][1]["Node Type"] == "CTE Scan"]
    assert not loops, "a CTE scanned once per row of the update"


def _outcome_params(name: str, leased: list[Any], *, known: bool = False) -> dict[str, Any]:
    def array(values: Any) -> str:
        return "{" + ",".join(values) + "}"

    ids = array(str(e.execution_id) for e in leased)
    attempts = array(str(e.attempt) for e in leased)
    nulls = array("NULL" for _ in leased)
    times = array('"' + e.scheduled_for.isoformat() + '"' for e in leased) if known else nulls
    if name == "ExecutionCompleteMany":
        return {
            "execution_ids": ids,
            "attempts": attempts,
            "results": nulls,
            "scopes": nulls,
            "sent_ats": nulls,
            "scheduled_fors": times,
            "now": None,
        }
    return {
        "execution_ids": ids,
        "attempts": attempts,
        "errors": array('"boom"' for _ in leased),
        "retryable": array("true" for _ in leased),
        "delays_s": array("10" for _ in leased),
        "scopes": nulls,
        "sent_ats": nulls,
        "scheduled_fors": times,
        "now": None,
    }


@pytest.mark.parametrize("name", ["ExecutionCompleteMany", "ExecutionFailMany"])
async def test_an_outcome_without_a_stale_attempt_reads_no_attempts_row_and_joins_no_two_ctes(
    db: Database, name: str
) -> None:
    # attempts analyzed while small (as at the start of a herd): the generic plan scans it whole to find
    # stale attempts to mark discarded, and a drain grows it by every completion (5.6 ms of a 9.9 ms
    # call at 31,000 rows). A call with no stale attempt must not read it at all. And the fail joined
    # input to failed twice by nested loop: 40 ms for 500 items, 9.6 ms without.
    queue, _ = await _ready_queue(db, 3)
    await db.transaction(lambda tx: tx.planner_statistics.analyze("attempts", target=10))
    leased = await db.statement(lambda tx: tx.executions.lease(queue, "w", 3, 60.0))
    assert len(leased) == 3
    nodes = await _generic_plan(db, name, _outcome_params(name, leased), analyze=True)
    reads = [
        (n["Node Type"], n["Actual Loops"])
        for n in nodes
        if n.get("Relation Name") == "attempts" and "Scan" in n["Node Type"]
    ]
    assert reads and all(loops == 0 for _, loops in reads), reads
    inserted = [n for n in nodes if n["Node Type"] == "ModifyTable" and n.get("Operation") == "Insert"]
    assert [n["Actual Rows"] for n in inserted] == [3]
    cte_joins = [
        [c.get("CTE Name") for c in n["Plans"]]
        for n in nodes
        if n["Node Type"] == "Nested Loop" and [c["Node Type"] for c in n.get("Plans", [])] == ["CTE Scan", "CTE Scan"]
    ]
    assert not [j for j in cte_joins if "clock" not in j], cte_joins


def _partitions_read(nodes: list[dict[str, Any]], index: str) -> set[str]:
    """The partitions of executions whose ``index`` the statement read (run-time pruning skips the rest)."""
    return {n["Partition"] for n in nodes if n.get("Index Name") == index and n.get("Actual Loops", 0) > 0}


async def _weeks_of_history(db: Database, ready: int, elsewhere: int) -> str:
    """History in weekly partitions from three weeks back: a queue with ``ready`` executions due now, and
    another queue's ``elsewhere`` two weeks back (a partition that holds rows, none of the first queue's).
    Answers the first queue."""
    await db.transaction(
        lambda tx: tx.schema._conn.execute(
            text("SELECT kairos_history_recut(kairos_history_week(now() - interval '21 days'))")
        )
    )
    queue, _ = await _ready_queue(db, ready)
    other = await tf.tenant(db, "other")
    old_job = await tf.job(db, other.tenant_id, queue=tf.tenant_queue(other.tenant_id, "pool"))
    await tf.ready_executions(db, old_job, elsewhere, first=datetime.now(timezone.utc) - timedelta(days=15))
    return queue


@pytest.mark.parametrize("name", ["ExecutionCompleteMany", "ExecutionFailMany"])
async def test_the_lease_and_an_outcome_read_one_weekly_partition_per_row(db: Database, name: str) -> None:
    # On a database that has lived, history holds a partition per week: a row found by its id alone was
    # looked for in every one (ten probes of a random key, in indexes of millions of rows, for each
    # lease, completion and failure: the herd on two million jobs drained at half the empty speed).
    # The lease joins its picked rows on (id, scheduled_for); an outcome's caller passes the time the
    # lease answered, and without it the statement still finds the row, in every week.
    queue = await _weeks_of_history(db, ready=5_000, elsewhere=5_000)
    lease_params = {
        "queue": queue,
        "worker_id": "w",
        "limit": 3,
        "lease_s": 60.0,
        "now": None,
        "salt": "ab",
        "skip_tenants": "{}",
    }
    nodes = await _generic_plan(db, "ExecutionLeaseFair", lease_params, analyze=True)
    below = list(_nodes(_leased_update(nodes)))[1:]
    probed = {
        n["Partition"] for n in below if n.get("Partition", "").startswith("executions") and n["Actual Loops"] > 0
    }
    assert len(probed) == 1, probed

    leased = await db.statement(lambda tx: tx.executions.lease(queue, "w", 3, 60.0))
    assert len(leased) == 3
    known = await _generic_plan(db, name, _outcome_params(name, leased[:1], known=True), analyze=True)
    assert len(_partitions_read(known, "executions_occurrence_key")) == 1
    await _generic_plan(db, name, _outcome_params(name, leased[1:], known=False), analyze=True)
    # Both found their rows: every one changed state.
    states = await db.transaction(
        lambda tx: tx.schema._conn.execute(
            text("SELECT count(*) FROM executions WHERE state <> 'leased' AND attempt = 1")
        )
    )
    assert states.scalar_one() == 3


async def test_a_heartbeat_reads_one_weekly_partition_when_the_time_is_known(db: Database) -> None:
    # The servicer passes the time of the lease it handed out; a worker heartbeating through another
    # executor passes none and is still found, in every week.
    queue = await _weeks_of_history(db, ready=2, elsewhere=50)
    [known, unknown] = await db.statement(lambda tx: tx.executions.lease(queue, "w", 2, 60.0))

    def params(e: Any, scheduled_for: str | None) -> dict[str, Any]:
        return {
            "execution_id": str(e.execution_id),
            "attempt": e.attempt,
            "lease_s": 120.0,
            "now": None,
            "scope": None,
            "scheduled_for": scheduled_for,
        }

    nodes = await _generic_plan(db, "ExecutionHeartbeat", params(known, known.scheduled_for.isoformat()), analyze=True)
    assert len(_partitions_read(nodes, "executions_occurrence_key")) == 1
    assert [n["Actual Rows"] for n in nodes if n["Node Type"] == "ModifyTable"] == [1]
    nodes = await _generic_plan(db, "ExecutionHeartbeat", params(unknown, None), analyze=True)
    assert [n["Actual Rows"] for n in nodes if n["Node Type"] == "ModifyTable"] == [1]
