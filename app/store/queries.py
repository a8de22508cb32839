"""Named SQL statements, loaded once from the package's ``sql/queries/*.sql``.

``app/sql`` is a link to the repository's ``sql/`` (the one place to edit them); a built
wheel carries copies as package data, so they are read through ``importlib.resources``.

Each block starts with ``-- name: NounVerb`` and a one-line ``--`` description, then the SQL.
Parameters use ``:name``; casts use ``CAST(:x AS type)`` (``:x::type`` would not bind).

Dialects: ``sql/cockroach/queries/*.sql`` holds CockroachDB's own text of a few statements, under
the same names (docs/cockroachdb.md says why each one needs it). ``q()`` returns a statement that
SQLAlchemy compiles to that text on a ``cockroachdb`` engine and to the ``sql/queries`` text on
every other, so callers never choose and PostgreSQL runs exactly what ``sql/queries`` says. A name
found only there is a CockroachDB-only statement (the overlay's, follower reads).

Catalogues apart: ``sql/drill`` holds the failure drills' own statements. They never join
``catalogue()`` nor the ``Store``; only app/drill/reads.py loads them (``own_statement``), under the
same rules, with one text for PostgreSQL and CockroachDB.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from sqlalchemy import TextClause, text
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import CompileError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler

COCKROACH = "cockroachdb"  # the SQLAlchemy dialect name of sqlalchemy-cockroachdb
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def sql_dir() -> Traversable:
    """The ``sql/`` directory shipped in the package (migrations/ and queries/)."""
    return files("app") / "sql"


def sql_files(folder: str) -> list[Traversable]:
    """The ``*.sql`` files of ``sql/<folder>`` (``folder`` may be ``a/b``), sorted by name."""
    where = sql_dir()
    for part in folder.split("/"):
        where = where / part
    return sorted((f for f in where.iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)


@dataclass(frozen=True)
class NamedQuery:
    name: str
    description: str
    sql: str
    source: str


def parse(source: str, content: str) -> list[NamedQuery]:
    starts = list(_NAME.finditer(content))
    out = []
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(content)
        body_lines = content[m.end() : end].strip("\n").splitlines()
        description = []
        while body_lines and body_lines[0].lstrip().startswith("--"):
            description.append(body_lines.pop(0).lstrip()[2:].strip())
        sql = "\n".join(body_lines).strip().rstrip(";").strip()
        out.append(NamedQuery(m.group(1), " ".join(description), sql, source))
    return out


def _load(folder: str) -> dict[str, NamedQuery]:
    found: dict[str, NamedQuery] = {}
    for path in sql_files(folder):
        for q in parse(path.name, path.read_text()):
            if q.name in found:
                raise RuntimeError(f"query {q.name} defined twice ({found[q.name].source}, {q.source})")
            found[q.name] = q
    return found


@cache
def catalogue() -> dict[str, NamedQuery]:
    """The statements of ``sql/queries``: what PostgreSQL runs, and CockroachDB unless it has its own."""
    return _load("queries")


@cache
def cockroach_catalogue() -> dict[str, NamedQuery]:
    """The statements of ``sql/cockroach/queries``: CockroachDB's text of a catalogue statement, or a
    CockroachDB-only one."""
    return _load("cockroach/queries")


@cache
def own_catalogue(folder: str) -> dict[str, NamedQuery]:
    """The statements of ``sql/<folder>`` (``drill``), a catalogue apart from ``catalogue()``."""
    return _load(folder)


@cache
def own_statement(folder: str, name: str) -> TextClause:
    """The statement called ``name`` in ``sql/<folder>``: the same text on every dialect."""
    try:
        return text(own_catalogue(folder)[name].sql)
    except KeyError:
        raise KeyError(f"no query named {name} in sql/{folder}") from None


def text_for(name: str, dialect: str) -> str:
    """The SQL that ``q(name)`` runs on an engine of ``dialect`` (tests and docs read it)."""
    if dialect == COCKROACH and name in cockroach_catalogue():
        return cockroach_catalogue()[name].sql
    if name in catalogue():
        return catalogue()[name].sql
    raise KeyError(f"no query named {name} for {dialect}")


class DialectText(TextClause):
    """A named statement with CockroachDB text of its own: compiled to that on CockroachDB, to the
    ``sql/queries`` text on every other dialect (``TextClause`` itself there, plans unchanged)."""

    inherit_cache = True  # cached per dialect: the compiled cache is keyed by dialect too

    def __init__(self, sql: str, cockroach: str) -> None:
        super().__init__(sql)
        self.cockroach = text(cockroach)


class CockroachOnlyText(TextClause):
    """A statement that exists only on CockroachDB (regions, follower reads): refused elsewhere."""

    inherit_cache = True


@compiles(DialectText)
def _compile_default(element: DialectText, compiler: SQLCompiler, **kw: object) -> str:
    return str(compiler.visit_textclause(element, **kw))  # type: ignore[no-untyped-call]


@compiles(DialectText, COCKROACH)
def _compile_cockroach(element: DialectText, compiler: SQLCompiler, **kw: object) -> str:
    return str(compiler.process(element.cockroach, **kw))


@compiles(CockroachOnlyText)
def _compile_refused(element: CockroachOnlyText, compiler: SQLCompiler, **kw: object) -> str:
    raise CompileError(f"a CockroachDB-only statement cannot run on {compiler.dialect.name}: {element.text[:60]}")


@compiles(CockroachOnlyText, COCKROACH)
def _compile_cockroach_only(element: CockroachOnlyText, compiler: SQLCompiler, **kw: object) -> str:
    return str(compiler.visit_textclause(element, **kw))  # type: ignore[no-untyped-call]


@cache
def _compiled(name: str) -> TextClause:
    own = cockroach_catalogue().get(name)
    common = catalogue().get(name)
    if common is None and own is None:
        raise KeyError(name)
    if common is None:
        assert own is not None
        return CockroachOnlyText(own.sql)
    if own is None:
        return text(common.sql)
    return DialectText(common.sql, own.sql)


def q(name: str) -> TextClause:
    """The compiled statement called ``name`` (its CockroachDB text on a CockroachDB engine)."""
    try:
        return _compiled(name)
    except KeyError:
        raise KeyError(f"no query named {name} in sql/queries or sql/cockroach/queries") from None


@cache
def driver_text(clause: TextClause, dialect: Dialect) -> str:
    """The text SQLAlchemy sends for ``clause`` (a ``q()`` statement) on ``dialect``, in the driver's
    parameter style (psycopg: ``%(name)s``), for code that runs a statement on the driver directly.
    Compiled once per statement and dialect."""
    return str(clause.compile(dialect=dialect))
