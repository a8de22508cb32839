"""Every SQL statement is named, described, used, and inside the PostgreSQL/CockroachDB rules.

The shipped catalogue (sql/queries) must be used by app/, and every ``q("Name")`` in app/ must name
one of its statements; the drills' own catalogue (sql/drill) must be used by app/drill/reads.py, the
one module that loads it; the test-only statements (tests/sql/factories.sql) must be used by
tests/factories.py. All follow the same rules.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.domain.states import EXECUTION_TRANSITIONS, JOB_TRANSITIONS, ExecutionState, JobState
from app.store import migrate
from app.store.queries import NamedQuery, catalogue, cockroach_catalogue, own_catalogue, parse, sql_dir
from tests import factories

APP = Path(__file__).resolve().parents[2] / "app"
FACTORIES = Path(factories.__file__)
DRILL_READS = APP / "drill" / "reads.py"
DRILL_SQL = "drill"  # sql/drill, the drills' own catalogue


def drill_statements() -> dict[str, NamedQuery]:
    return own_catalogue(DRILL_SQL)


# Things CockroachDB lacks or ignores (ARCHITECTURE.md, compatibility rules).
BANNED = {
    r"\bLISTEN\b|\bNOTIFY\b|pg_notify": "LISTEN/NOTIFY does not exist on CockroachDB",
    r"pg_(try_)?advisory": "advisory locks are silent no-ops on CockroachDB",
    r"\b(BIG)?SERIAL\b|\bCREATE\s+SEQUENCE\b|\bnextval\s*\(": "no sequences: keys are UUID v4",
    r"(?<!:):\w+::": "':x::type' does not bind in SQLAlchemy text(); use CAST(:x AS type)",
    r"\bON\s+CONFLICT\s+ON\s+CONSTRAINT\b": "name the conflict columns, not a constraint",
    r"\bLOCK\s+TABLE\b": "no table locks",
    r"\bFOR\s+(NO\s+KEY\s+UPDATE|KEY\s+SHARE)\b": "only FOR UPDATE / FOR SHARE exist on CockroachDB",
}


def code(sql: str) -> str:
    """SQL without its -- comments."""
    return re.sub(r"--[^\n]*", "", sql)


def app_source() -> str:
    return "\n".join(p.read_text() for p in APP.rglob("*.py"))


def production_source() -> str:
    """app/ but the drills: where the shipped catalogue's statements must be used."""
    return "\n".join(p.read_text() for p in APP.rglob("*.py") if (APP / "drill") not in p.parents)


def test_catalogue_loads_with_unique_names() -> None:
    assert len(catalogue()) > 10


def check_statement(query: NamedQuery, users: str, where: str) -> None:
    name = query.name
    assert query.description, f"{name} needs a one-line description under its name"
    assert re.match(r"^[A-Z][A-Za-z0-9]+$", name), f"{name}: noun-first CamelCase names"
    assert f'"{name}"' in users, f"{name} is never used in {where}"
    for pattern, why in BANNED.items():
        assert not re.search(pattern, code(query.sql), re.IGNORECASE), f"{name}: {why}"


@pytest.mark.parametrize("name", sorted(catalogue()))
def test_statement_is_described_used_and_portable(name: str) -> None:
    check_statement(catalogue()[name], production_source(), "app/ outside app/drill")


@pytest.mark.parametrize("name", sorted(drill_statements()))
def test_drill_statement_is_described_used_and_portable(name: str) -> None:
    check_statement(drill_statements()[name], DRILL_READS.read_text(), "app/drill/reads.py")


def test_drill_statements_stay_out_of_the_shipped_catalogue() -> None:
    assert len(drill_statements()) >= 3
    assert (
        set(drill_statements()) & (set(catalogue()) | set(cockroach_catalogue()) | set(factories.statements())) == set()
    )


def test_only_the_drills_reads_load_the_drill_catalogue() -> None:
    loaders = {
        str(p.relative_to(APP)) for p in APP.rglob("*.py") if re.search(r"\bown_(statement|catalogue)\b", p.read_text())
    }
    assert loaders == {"store/queries.py", "drill/reads.py"}


@pytest.mark.parametrize("name", sorted(factories.statements()))
def test_factory_statement_is_described_used_and_portable(name: str) -> None:
    check_statement(factories.statements()[name], FACTORIES.read_text(), "tests/factories.py")


def test_factory_statements_stay_out_of_the_shipped_catalogue() -> None:
    assert len(factories.statements()) >= 3
    assert set(factories.statements()) & set(catalogue()) == set()


# statement("Name") in app/drill/reads.py, the drills' own catalogue.
DRILL_CALL = re.compile(r"""\bstatement\(\s*["'](\w+)["']""")


def test_every_statement_call_in_the_drills_reads_names_a_drill_statement() -> None:
    called = set(DRILL_CALL.findall(DRILL_READS.read_text()))
    assert called and called <= set(drill_statements())


# q("Name"), also split over lines: q(\n "Name").
CALL = re.compile(r"""\bq\(\s*["'](\w+)["']""")


def unknown_statements(source: str, known: set[str]) -> set[str]:
    return {name for name in CALL.findall(source) if name not in known}


def test_every_q_call_in_app_names_a_statement() -> None:
    assert CALL.findall(app_source()), "expected q(...) calls in app/"
    assert unknown_statements(app_source(), set(catalogue()) | set(cockroach_catalogue())) == set()


def test_an_unknown_statement_name_is_caught() -> None:
    source = 'await conn.execute(q("JobGet"), p)\nawait conn.execute(q(\n    "JobSeedMany"), p)\n'
    assert unknown_statements(source, set(catalogue())) == {"JobSeedMany"}


def test_no_sql_strings_outside_the_catalogue() -> None:
    dml = re.compile(r"[\"'](\s*)(SELECT|INSERT INTO|UPDATE \w+ SET|DELETE FROM)\s", re.IGNORECASE)
    offenders = [
        str(p.relative_to(APP)) for p in APP.rglob("*.py") if "_pb2" not in p.name and dml.search(p.read_text())
    ]
    assert offenders == []


@pytest.mark.parametrize("migration", migrate.available(), ids=lambda m: m.version)
def test_migrations_are_portable(migration: migrate.Migration) -> None:
    for pattern, why in BANNED.items():
        assert not re.search(pattern, code(migration.script), re.IGNORECASE), f"{migration.version}: {why}"


def _guarded_updates(table: str) -> list[tuple[str, str, set[str], str]]:
    """(query, new state, guarded source states) for every UPDATE <table> that sets state."""
    found = []
    for name, query in catalogue().items():
        for m in re.finditer(
            rf"UPDATE\s+{table}\b(?:\s+AS\s+\w+)?\s+SET(.*?)(?:\bRETURNING\b|\Z|\)\s*,\s*\w+\s+AS\s*\(|\)\s*(?:SELECT|INSERT|UPDATE|DELETE)\b)",
            query.sql,
            re.IGNORECASE | re.DOTALL,
        ):
            body = m.group(1)
            parts = re.split(r"\bWHERE\b", body, maxsplit=1, flags=re.IGNORECASE)
            assignments, where = parts[0], parts[1] if len(parts) > 1 else ""
            new = re.search(r"(?<![.\w])state\s*=\s*'(\w+)'", assignments)
            if not new:
                continue
            sources = set(re.findall(r"\bstate\s*=\s*'(\w+)'", where))
            sources |= {
                s
                for group in re.findall(r"\bstate\s+IN\s*\(([^)]*)\)", where, re.IGNORECASE)
                for s in re.findall(r"'(\w+)'", group)
            }
            found.append((name, new.group(1), sources, where))
    return found


def test_every_guarded_execution_update_is_a_listed_transition() -> None:
    updates = _guarded_updates("executions")
    assert updates, "expected guarded UPDATEs of executions"
    for name, new, sources, _ in updates:
        assert new in {s.value for s in ExecutionState}, name
        assert sources, f"{name} sets state={new!r} without guarding the source state"
        for src in sources:
            assert ExecutionState(new) in EXECUTION_TRANSITIONS[ExecutionState(src)], f"{name}: {src} -> {new}"


def test_job_state_changes_are_listed_transitions() -> None:
    for name, new, sources, _ in _guarded_updates("jobs"):
        for src in sources:
            assert JobState(new) in JOB_TRANSITIONS[JobState(src)], f"{name}: {src} -> {new}"


def test_parser_reads_names_descriptions_and_bodies() -> None:
    parsed = parse("x.sql", "-- name: ThingGet\n-- Get a thing.\nSELECT 1;\n\n-- name: ThingPut\n-- Put.\nSELECT 2;\n")
    assert [(q.name, q.description, q.sql) for q in parsed] == [
        ("ThingGet", "Get a thing.", "SELECT 1"),
        ("ThingPut", "Put.", "SELECT 2"),
    ]
    assert sql_dir().is_dir()


def test_a_migration_checksum_covers_statements_not_comments() -> None:
    script = "-- the schema\nCREATE TABLE t (a INT);\n"
    assert migrate.statements_checksum(script) == migrate.statements_checksum(
        "-- the schema, reworded\n\nCREATE TABLE t (a INT);  \n"
    )
    assert migrate.statements_checksum(script) != migrate.statements_checksum("CREATE TABLE t (a BIGINT);\n")


def test_the_driver_text_of_a_statement_is_its_dialects_own_in_psycopgs_parameter_style() -> None:
    """Database.statement runs driver_text on psycopg: CockroachDB's own text where it has one."""
    from app.store.db import create_engine
    from app.store.queries import driver_text, q

    postgres = create_engine("postgresql+psycopg://kairos@localhost/kairos").dialect
    cockroach = create_engine("cockroachdb+psycopg://kairos@localhost/kairos").dialect
    name = next(n for n in cockroach_catalogue() if n in catalogue())
    on_postgres, on_cockroach = driver_text(q(name), postgres), driver_text(q(name), cockroach)
    assert on_postgres != on_cockroach
    for sql, source in ((on_postgres, catalogue()[name].sql), (on_cockroach, cockroach_catalogue()[name].sql)):
        binds = set(re.findall(r"(?<![:\w\\]):(\w+)(?!:)", code(source)))
        assert binds and binds <= set(re.findall(r"%\((\w+)\)s", sql))
        assert re.search(r"(?<![:\w\\]):[a-z_]+\b(?!:)", code(sql)) is None  # no SQLAlchemy-style bind is left
