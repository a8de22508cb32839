"""CockroachDB's statements: chosen by dialect, and inside what CockroachDB documents.

``q(name)`` compiles to ``sql/cockroach/queries`` text on a cockroachdb engine and to the
``sql/queries`` text everywhere else (PostgreSQL runs exactly what sql/queries says, so its plans do
not move). The CockroachDB text of every statement follows the rules CockroachDB documents (one
modification per table per statement, data-modifying CTEs at the top level only, no correlated
LIMIT) and every construct it uses is listed, with its documentation page, in docs/cockroachdb.md.
The drills' own statements (sql/drill, one text for both) are held to the same rules.
Variants of statements that exist on both are also valid PostgreSQL: they run here, through the
cockroachdb dialect, against PostgreSQL (tests at the end).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pglast
import pytest
from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import CompileError
from sqlalchemy_cockroachdb.psycopg import CockroachDBDialectAsync_psycopg

from app.store.queries import COCKROACH, DialectText, catalogue, cockroach_catalogue, own_catalogue, q, text_for
from tests.integration import cockroach_cluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "cockroachdb.md"
PG = postgresql.psycopg.dialect()
CRDB = CockroachDBDialectAsync_psycopg()
VARIANTS = sorted(set(cockroach_catalogue()) & set(catalogue()))
COCKROACH_ONLY = sorted(set(cockroach_catalogue()) - set(catalogue()))

# The constructs beyond plain SELECT/INSERT/UPDATE/DELETE that CockroachDB's text may use; each must
# be in docs/cockroachdb.md's table with the page that documents it (the key is what the table names).
CONSTRUCTS = {
    "WITH RECURSIVE": r"\bWITH\s+RECURSIVE\b",
    "LATERAL": r"\bLATERAL\b",
    "FOR UPDATE": r"\bFOR\s+UPDATE\b",
    "SKIP LOCKED": r"\bSKIP\s+LOCKED\b",
    "DELETE ... USING": r"\bDELETE\s+FROM\s+\w+(\s+AS\s+\w+)?\s+USING\b",
    "UPDATE ... FROM": r"\bUPDATE\s+\w+(\s+AS\s+\w+)?\s+SET\b[^;]*?\bFROM\b",
    "WITH ORDINALITY": r"\bWITH\s+ORDINALITY\b",
    "unnest": r"\bunnest\s*\(",
    "array casts": r"AS\s+\w+\[\]\s*\)",
    "= ANY (array)": r"=\s*ANY\s*\(",
    "ON CONFLICT DO NOTHING": r"\bON\s+CONFLICT\b[^;]*?\bDO\s+NOTHING\b",
    "ON CONFLICT DO UPDATE": r"\bON\s+CONFLICT\b[^;]*?\bDO\s+UPDATE\b",
    "RETURNING": r"\bRETURNING\b",
    "data-modifying CTEs": r"\bAS\s*\(\s*(INSERT|UPDATE|DELETE)\b",
    "DISTINCT ON": r"\bDISTINCT\s+ON\b",
    "FILTER (WHERE ...)": r"\)\s*FILTER\s*\(\s*WHERE\b",
    "window functions": r"\bOVER\s*\(",
    "percentile_cont WITHIN GROUP": r"\bpercentile_cont\b",
    "FULL OUTER JOIN": r"\bFULL\s+(OUTER\s+)?JOIN\b",
    "row comparison": r"\)\s*[<>]=?\s*\(\s*CAST",
    "date_trunc": r"\bdate_trunc\s*\(",
    "EXTRACT(EPOCH ...)": r"\bEXTRACT\s*\(\s*EPOCH\b",
    "interval arithmetic": r"\*\s*INTERVAL\s+'",
    "jsonb @>": r"@>",
    "md5": r"\bmd5\s*\(",
    "generate_series": r"\bgenerate_series\s*\(",
    "AS OF SYSTEM TIME": r"\bAS\s+OF\s+SYSTEM\s+TIME\b",
    "SHOW REGIONS": r"\bSHOW\s+REGIONS\b",
    "SET LOCAL": r"\bSET\s+LOCAL\b",
}
# What only PostgreSQL has: never in the text CockroachDB runs. Statements only PostgreSQL ever runs
# (gated by dialect in app/) say so in their description, or belong to a PostgreSQL-only table class:
# app/store/planner_statistics.py and the drills' Replication (app/drill/reads.py).
POSTGRES_ONLY_TABLES = ("Statistics", "Replication")
POSTGRES_ONLY = {
    r"\bpg_\w+": "PostgreSQL catalogue functions and views",
    r"\bANALYZE\b": "statistics are CockroachDB's own business",
    r"\bsynchronous_commit\b": "every CockroachDB commit is replicated by consensus",
}


def code(sql: str) -> str:
    return re.sub(r"--[^\n]*", "", sql)


def drill_statements() -> dict[str, str]:
    """The drills' own statements (sql/drill): one text on every dialect."""
    return {name: s.sql for name, s in own_catalogue("drill").items()}


def cockroach_text(name: str) -> str:
    return code(drill_statements()[name] if name in drill_statements() else text_for(name, COCKROACH))


def modified_tables(sql: str) -> Counter[str]:
    return Counter(
        m.lower() for m in re.findall(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+(\w+)", sql, re.IGNORECASE)
    )


def postgres_only(name: str) -> bool:
    if name in cockroach_catalogue():
        return False
    statement = own_catalogue("drill").get(name) or catalogue()[name]
    return name.startswith(POSTGRES_ONLY_TABLES) or statement.description.startswith("PostgreSQL")


def runs_on_cockroach() -> list[str]:
    names = set(catalogue()) | set(cockroach_catalogue()) | set(drill_statements())
    return sorted(n for n in names if not postgres_only(n))


def test_the_drills_statements_are_checked_here_too() -> None:
    assert {"DrillShardsLive", "DrillJobsPresent"} <= set(runs_on_cockroach())
    assert "ReplicationWalPosition" in drill_statements() and "ReplicationWalPosition" not in runs_on_cockroach()


# -- selection --------------------------------------------------------------------------------------


def test_a_statement_with_its_own_cockroach_text_compiles_to_it_only_on_cockroachdb() -> None:
    both = DialectText("SELECT :a AS x", "SELECT :a + 1 AS x, :b AS y")
    assert str(both.compile(dialect=PG)) == "SELECT %(a)s AS x"
    compiled = both.compile(dialect=CRDB)
    assert str(compiled) == "SELECT %(a)s + 1 AS x, %(b)s AS y" and set(compiled.binds) == {"a", "b"}


@pytest.mark.parametrize("name", VARIANTS)
def test_postgresql_runs_exactly_the_sql_queries_text(name: str) -> None:
    assert str(q(name).compile(dialect=PG)) == str(text(catalogue()[name].sql).compile(dialect=PG))
    assert str(q(name).compile(dialect=CRDB)) != str(q(name).compile(dialect=PG))


@pytest.mark.parametrize("name", COCKROACH_ONLY)
def test_a_cockroach_only_statement_is_refused_elsewhere(name: str) -> None:
    with pytest.raises(CompileError, match="CockroachDB-only"):
        q(name).compile(dialect=PG)
    assert str(q(name).compile(dialect=CRDB)).strip()


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_takes_the_parameters_its_statement_takes(name: str) -> None:
    binds = {dialect: set(q(name).compile(dialect=dialect).binds) for dialect in (PG, CRDB)}
    assert binds[PG] == binds[CRDB], f"{name}: the call site passes one set of parameters to both"


@pytest.mark.parametrize("name", VARIANTS)
def test_a_variant_is_valid_postgresql_too(name: str) -> None:
    pglast.parse_sql(re.sub(r"(?<!:):(\w+)", r"$1", cockroach_text(name)))  # :name binds as placeholders


# -- CockroachDB's rules ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", runs_on_cockroach())
def test_cockroachs_text_modifies_each_table_once_per_statement(name: str) -> None:
    """CockroachDB refuses statements with several modification subqueries of one table
    (known-limitations: 'Statements containing multiple modification subqueries of the same table')."""
    twice = {t: n for t, n in modified_tables(cockroach_text(name)).items() if n > 1}
    assert not twice, f"{name} modifies {twice} more than once on CockroachDB: give it a CockroachDB variant"


@pytest.mark.parametrize("name", runs_on_cockroach())
def test_cockroachs_text_has_no_correlated_limit(name: str) -> None:
    """LIMIT of a constant or a parameter: CockroachDB's documented forms never take a column."""
    for limit in re.findall(r"(?<![:\w])LIMIT\s+([^\s)][^\n]*)", cockroach_text(name), re.IGNORECASE):
        assert re.match(r"(:\w+|CAST\(:\w+ AS INT8?\)|\d+)(\s|\)|$)", limit.strip(), re.IGNORECASE), (
            f"{name}: LIMIT {limit}"
        )


@pytest.mark.parametrize("name", runs_on_cockroach())
def test_cockroachs_text_uses_nothing_postgresql_only(name: str) -> None:
    for pattern, why in POSTGRES_ONLY.items():
        assert not re.search(pattern, cockroach_text(name), re.IGNORECASE), f"{name}: {why}"


def test_every_construct_in_cockroachs_text_is_documented_with_its_page() -> None:
    doc = DOC.read_text()
    table = {m.group(1).strip("` "): m.group(2) for m in re.finditer(r"^\| ([^|]+) \| ([^|]+) \|", doc, re.MULTILINE)}
    used = {
        c
        for name in runs_on_cockroach()
        for c, p in CONSTRUCTS.items()
        if re.search(p, cockroach_text(name), re.IGNORECASE | re.DOTALL)
    }
    assert used >= {"WITH ORDINALITY", "DELETE ... USING", "array casts", "SKIP LOCKED", "AS OF SYSTEM TIME"}
    for construct in sorted(used):
        assert construct in table, f"docs/cockroachdb.md has no row for {construct}"
        assert "cockroachlabs.com/docs" in table[construct], f"{construct}: no CockroachDB docs page cited"


# -- on a real CockroachDB (skipped here; docs/cockroachdb.md says how to run it) ---------------------


@pytest.mark.skipif(not cockroach_cluster.REAL, reason=cockroach_cluster.WHY_SKIPPED)
async def test_every_statement_plans_on_cockroachdb() -> None:
    """EXPLAIN of each statement CockroachDB runs: it parses, binds and plans there."""
    async with cockroach_cluster.fresh_database() as db, db.engine.connect() as conn:
        for name in runs_on_cockroach():
            if name.startswith(("Transaction", "Overlay")):  # not explainable (SET, SHOW)
                continue
            sql = drill_statements()[name] if name in drill_statements() else text_for(name, COCKROACH)
            statement = text(sql) if name in drill_statements() else q(name)
            params = dict.fromkeys(statement.compile(dialect=conn.dialect).binds)
            explain = text("EXPLAIN " + sql)
            await conn.execute(explain, params)


# -- CockroachDB's texts on PostgreSQL (the rest: test_cockroach_execution_store.py) ---------------


async def test_cockroachs_http_pool_lease_skips_the_tenants_it_is_told_to(database_url: str) -> None:
    from app.store import Database
    from app.store.db import create_engine
    from tests import factories

    db = Database(create_engine(database_url.replace("postgresql+psycopg://", "cockroachdb+psycopg://"), pool_size=2))
    try:
        waiting, served = await factories.tenant(db), await factories.tenant(db)
        for t in (waiting, served):
            job = await factories.job(db, t.tenant_id, queue=factories.HTTP_QUEUE)
            await factories.ready_executions(db, job, 3)
        leased = await db.transaction(
            lambda tx: tx.executions.lease(factories.HTTP_QUEUE, "w1", 10, 30.0, skip_tenants=[waiting.tenant_id]),
            isolation="READ COMMITTED",
        )
        assert sorted({x.tenant_id for x in leased}) == [str(served.tenant_id)] and len(leased) == 3
        assert {x.attempt for x in leased} == {1}
    finally:
        await db.close()


async def test_cockroachs_fair_lease_stops_at_the_tenants_in_flight_quota(database_url: str) -> None:
    from app.store import Database
    from app.store.db import create_engine
    from tests import factories

    db = Database(create_engine(database_url.replace("postgresql+psycopg://", "cockroachdb+psycopg://"), pool_size=2))
    try:
        tenant = await factories.tenant(db)
        await db.transaction(lambda tx: tx.tenants.set_quota(tenant.tenant_id, max_inflight=4))
        job = await factories.job(db, tenant.tenant_id, queue=factories.HTTP_QUEUE)
        await factories.ready_executions(db, job, 10)

        async def lease(limit: int) -> int:
            got = await db.transaction(
                lambda tx: tx.executions.lease(factories.HTTP_QUEUE, "w1", limit, 30.0), isolation="READ COMMITTED"
            )
            return len(got)

        assert [await lease(3), await lease(10), await lease(10)] == [3, 1, 0]
    finally:
        await db.close()
