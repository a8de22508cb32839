"""Named SQL statements, loaded once from ``sql/queries/*.sql``.

Each block starts with ``-- name: NounVerb`` and a one-line ``--`` description, then the SQL.
Parameters use ``:name``; casts use ``CAST(:x AS type)`` (``:x::type`` would not bind).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from sqlalchemy import TextClause, text

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def sql_dir() -> Path:
    override = os.environ.get("KAIROS_SQL_DIR")
    return Path(override) if override else Path(__file__).resolve().parents[2] / "sql"


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


@cache
def catalogue() -> dict[str, NamedQuery]:
    found: dict[str, NamedQuery] = {}
    for path in sorted((sql_dir() / "queries").glob("*.sql")):
        for q in parse(path.name, path.read_text()):
            if q.name in found:
                raise RuntimeError(f"query {q.name} defined twice ({found[q.name].source}, {q.source})")
            found[q.name] = q
    return found


@cache
def _compiled(name: str) -> TextClause:
    return text(catalogue()[name].sql)


def q(name: str) -> TextClause:
    """The compiled statement called ``name``."""
    try:
        return _compiled(name)
    except KeyError:
        raise KeyError(f"no query named {name} in {sql_dir() / 'queries'}") from None
