"""The CockroachDB multi-region overlay (sql/cockroach/) and `kairos db upgrade --cockroach-overlay`.

CockroachDB cannot run here: the overlay is checked structurally (every statement tokenizes with
PostgreSQL's own scanner, has one of the documented CockroachDB forms, and the parts that are
PostgreSQL syntax parse with pglast), rendered for a three-region plan, applied by the runner with
the server's answers faked, and refused, with exit 2 and one line, on PostgreSQL.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pglast
import pytest
from pglast import parser as pg_parser

from app import errors
from app.store import Database, migrate, overlay
from app.store.db import create_engine
from app.store.schema import Schema
from tests.support.cli import run_kairos

PLAN = overlay.OverlayPlan(
    database="kairos",
    primary_region="us-east1",
    regions=("europe-west1", "us-east1", "us-west1"),
    secondary_region="us-west1",
    retention_days=30,
)
IDENT = r'"[^"]+"'
TABLE = r"[a-z_]+"
# The CockroachDB forms the overlay may use, each from the page its file cites.
FORMS = {
    "set primary region": rf"ALTER DATABASE {IDENT} SET PRIMARY REGION {IDENT}",
    "add region": rf"ALTER DATABASE {IDENT} ADD REGION IF NOT EXISTS {IDENT}",
    "set secondary region": rf"ALTER DATABASE {IDENT} SET SECONDARY REGION {IDENT}",
    "survive region failure": rf"ALTER DATABASE {IDENT} SURVIVE REGION FAILURE",
    "global table": rf"ALTER TABLE {TABLE} SET LOCALITY GLOBAL",
    "regional table": rf"ALTER TABLE {TABLE} SET LOCALITY REGIONAL BY TABLE IN PRIMARY REGION",
    "split at": rf"ALTER TABLE {TABLE} SPLIT AT (?P<select>SELECT .+)",
    "storage parameters": rf"ALTER TABLE {TABLE} (SET|RESET) \(.+\)",
}


def form_of(sql: str) -> tuple[str, re.Match[str]]:
    flat = " ".join(sql.split())
    for name, pattern in FORMS.items():
        if m := re.fullmatch(pattern, flat, re.DOTALL):
            return name, m
    raise AssertionError(f"not a documented overlay form: {flat}")


def rendered() -> list[overlay.OverlayStatement]:
    return overlay.render(PLAN)


def test_every_overlay_file_parses_into_statements() -> None:
    files = overlay.files()
    assert [f.name for f in files] == [
        "0001_regions.sql",
        "0002_localities.sql",
        "0003_due_index_splits.sql",
        "0004_history_ttl.sql",
    ]
    for f in files:
        assert overlay.parse(f.name, f.read_text()), f.name


@pytest.mark.parametrize("statement", rendered(), ids=lambda s: f"{s.source}:{' '.join(s.sql.split()[:4])}")
def test_every_overlay_statement_is_a_documented_form_and_scans(statement: overlay.OverlayStatement) -> None:
    tokens = pg_parser.scan(statement.sql)  # PostgreSQL's scanner: quoting, $$ strings, no stray characters
    assert tokens
    assert statement.sql.count("(") == statement.sql.count(")")
    name, m = form_of(statement.sql)
    if name == "split at":
        pglast.parse_sql(m.group("select"))
    if name == "storage parameters":  # ALTER TABLE ... SET/RESET (...) is PostgreSQL syntax too
        [raw] = pglast.parse_sql(statement.sql)
        for option in raw.stmt.cmds[0].def_:
            if option.defname == "ttl_expiration_expression":  # the expression itself, over its table
                pglast.parse_sql(f"SELECT {option.arg.sval} FROM {raw.stmt.relation.relname}")


def test_the_regions_come_first_then_localities_splits_and_ttl() -> None:
    sqls = [" ".join(s.sql.split()) for s in rendered()]
    assert sqls[:5] == [
        'ALTER DATABASE "kairos" SET PRIMARY REGION "us-east1"',
        'ALTER DATABASE "kairos" ADD REGION IF NOT EXISTS "europe-west1"',
        'ALTER DATABASE "kairos" ADD REGION IF NOT EXISTS "us-west1"',
        'ALTER DATABASE "kairos" SET SECONDARY REGION "us-west1"',
        'ALTER DATABASE "kairos" SURVIVE REGION FAILURE',
    ]
    assert "ALTER TABLE due_index SPLIT AT SELECT s FROM generate_series(1, 255) AS g (s)" in sqls
    ttl = [s for s in sqls if "ttl_expiration_expression" in s]
    assert len(ttl) == 2 and all("finished_at + INTERVAL '31 days'" in s for s in ttl)  # retention 30 + 1 day


def test_without_retention_the_ttl_is_removed_and_without_a_secondary_none_is_set() -> None:
    plan = overlay.OverlayPlan("kairos", "us-east1", PLAN.regions, None, retention_days=0)
    sqls = [" ".join(s.sql.split()) for s in overlay.render(plan)]
    assert "ALTER TABLE executions RESET (ttl)" in sqls and "ALTER TABLE attempts RESET (ttl)" in sqls
    assert not any("ttl_expiration_expression" in s or "SECONDARY" in s for s in sqls)


def test_identifiers_are_quoted_so_no_region_name_can_break_out() -> None:
    plan = overlay.OverlayPlan('we"ird', 'a"; DROP TABLE jobs; --', ('a"; DROP TABLE jobs; --', "b", "c"))
    first = overlay.render(plan)[0].sql
    assert first == 'ALTER DATABASE "we""ird" SET PRIMARY REGION "a""; DROP TABLE jobs; --"'
    assert len(pglast.parser.split(first, with_parser=False)) == 1


def _tables_created_by_migrations() -> set[str]:
    names: set[str] = set()
    for m in migrate.available():
        if "-- kairos: postgresql-only" in m.script:  # never run on CockroachDB: its tables are not there
            continue
        names |= set(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", m.script))
    return names | {"schema_migrations"}


def test_every_table_has_a_locality() -> None:
    localities: dict[str, str] = {}
    for s in rendered():
        if m := re.match(r"ALTER TABLE (\w+) SET LOCALITY (.+)", " ".join(s.sql.split())):
            assert m.group(1) not in localities, f"{m.group(1)} has two localities"
            localities[m.group(1)] = m.group(2)
    missing = _tables_created_by_migrations() - set(localities)
    assert not missing, f"tables without a locality in sql/cockroach/0002_localities.sql: {sorted(missing)}"
    assert {t for t, loc in localities.items() if loc == "GLOBAL"} == {
        "tenants",
        "api_keys",
        "pools",
        "pool_grants",
        "oidc_keys",
        "schema_migrations",
    }


def test_an_unknown_directive_or_an_unterminated_statement_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown overlay directive"):
        overlay.parse("x.sql", "-- kairos: sometimes\nALTER TABLE jobs SET LOCALITY GLOBAL;\n")
    with pytest.raises(ValueError, match="does not end"):
        overlay.parse("x.sql", "ALTER TABLE jobs SET LOCALITY GLOBAL\n")


@pytest.mark.parametrize(
    ("regions", "primary", "secondary", "field"),
    [
        (["a", "b", "c"], "", None, "--primary-region"),
        (["a", "b", "c"], "z", None, "--primary-region"),
        (["a", "b", "c"], "a", "a", "--secondary-region"),
        (["a", "b", "c"], "a", "q", "--secondary-region"),
        (["a", "b"], "a", None, "--cockroach-overlay"),
        ([], "a", None, "--cockroach-overlay"),
    ],
)
def test_a_plan_the_cluster_cannot_hold_is_refused(
    regions: list[str], primary: str, secondary: str | None, field: str
) -> None:
    with pytest.raises(errors.InvalidInput) as refused:
        overlay.plan_for("kairos", regions, primary, secondary, 30)
    assert refused.value.field == field


# -- the runner and the command ----------------------------------------------------------------------


async def test_the_runner_applies_every_statement_in_order_outside_a_transaction(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's answers are faked (version, regions); the statements are recorded, not run."""
    db = Database(create_engine(database_url.replace("postgresql+psycopg://", "cockroachdb+psycopg://"), pool_size=2))
    ran: list[tuple[str, bool]] = []

    async def version(self: Schema) -> tuple[str, str]:
        return "CockroachDB CCL v24.1.0 (x86_64-pc-linux-gnu)", "kairos"

    async def regions(self: Schema) -> list[str]:
        return list(PLAN.regions)

    async def run_script(self: Schema, script: str) -> None:
        ran.append((script, self._conn.sync_connection.get_execution_options().get("isolation_level") == "AUTOCOMMIT"))

    monkeypatch.setattr(Schema, "server_version", version)
    monkeypatch.setattr(Schema, "cluster_regions", regions)
    monkeypatch.setattr(Schema, "run_script", run_script)
    try:
        applied = await overlay.apply(db, primary_region="us-east1", secondary_region="us-west1", retention_days=30)
    finally:
        await db.close()
    assert applied == [s.sql for s in rendered()]
    assert [sql for sql, _ in ran] == applied and all(autocommit for _, autocommit in ran)


async def _schema_fingerprint(db: Database) -> Any:
    return await db.transaction(lambda tx: tx.schema.applied())


@pytest.mark.parametrize("scheme", ["postgresql+psycopg://", "cockroachdb+psycopg://"])
async def test_the_overlay_on_postgresql_exits_2_with_one_line_and_changes_nothing(
    db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], scheme: str
) -> None:
    before = await _schema_fingerprint(db)
    url = database_url.replace("postgresql+psycopg://", scheme)
    result = await asyncio.to_thread(
        run_kairos,
        monkeypatch,
        capsys,
        "db",
        "upgrade",
        "--cockroach-overlay",
        "--primary-region",
        "us-east1",
        env={"KAIROS_DATABASE_URL": url},
    )
    assert result.code == 2, (result.out, result.err)
    assert "needs CockroachDB" in result.error_line and "PostgreSQL" in result.error_line
    assert result.out == ""
    assert await _schema_fingerprint(db) == before


async def test_region_options_without_the_overlay_exit_2(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = await asyncio.to_thread(
        run_kairos,
        monkeypatch,
        capsys,
        "db",
        "upgrade",
        "--primary-region",
        "us-east1",
        env={"KAIROS_DATABASE_URL": database_url},
    )
    assert result.code == 2 and "--cockroach-overlay" in result.error_line


async def test_plain_upgrade_still_only_migrates(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = await asyncio.to_thread(
        run_kairos, monkeypatch, capsys, "db", "upgrade", env={"KAIROS_DATABASE_URL": database_url}
    )
    assert result.code == 0, result.err
    assert result.out.startswith("applied 0 migration(s)") and "overlay" not in result.out
