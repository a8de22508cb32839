"""Named SQL statements, loaded once from the package's ``sql/queries/*.sql``.

``app/sql`` is a link to the repository's ``sql/`` (the one place to edit them); a built
wheel carries copies as package data, so they are read through ``importlib.resources``.

Each block starts with ``-- name: NounVerb`` and a one-line ``--`` description, then the SQL.
Parameters use ``:name``; casts use ``CAST(:x AS type)`` (``:x::type`` would not bind).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

from sqlalchemy import TextClause, text

_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def sql_dir() -> Traversable:
    """The ``sql/`` directory shipped in the package (migrations/ and queries/)."""
    return files("app") / "sql"


def sql_files(folder: str) -> list[Traversable]:
    """The ``*.sql`` files of ``sql/<folder>``, sorted by name."""
    return sorted((f for f in (sql_dir() / folder).iterdir() if f.name.endswith(".sql")), key=lambda f: f.name)


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
    for path in sql_files("queries"):
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
        raise KeyError(f"no query named {name} in sql/queries") from None
