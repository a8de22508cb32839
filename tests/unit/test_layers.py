"""Imports point one way (docs/architecture.md, "Layers").

Every module under app/ is parsed with ``ast``; each ``app.*`` import it makes, at module level or
inside a function, must go to its own layer or one the table below allows. SQLAlchemy and psycopg
are imported by app/store alone, the generated gRPC modules by app/rpc alone, and the rest of the
tenant SDK only where the server deliberately shares code with tenants. Statements run on a
connection in app/store and, for the drills' own reads, app/drill/reads.py alone.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"

# Layer of each first component under app (a package or a top-level module).
LAYER_OF = {
    "cli": "cli",
    "api": "api",
    "rpc": "rpc",
    "scheduler": "scheduler",
    "executor": "executor",
    "store": "store",
    "domain": "domain",
    "drill": "drill",
    "config": "foundation",
    "_config_fields": "foundation",  # app.config's private parts: its parsers and the worker's settings
    "_config_worker": "foundation",
    "config_docs": "foundation",  # python -m app.config_docs: the settings tables of docs/configuration.md
    "errors": "errors",
    "observability": "foundation",
    "duties": "foundation",
}

_BELOW_TIERS = {"store", "domain", "foundation", "errors"}

# layer -> the other layers it may import (its own is always allowed).
ALLOWED = {
    # The composition root: starts every process and wires transports to the tiers under them.
    "cli": {"api", "rpc", "scheduler", "executor", "drill", *_BELOW_TIERS},
    # Transports: on the tier logic, never on each other.
    "api": {"scheduler", "executor", *_BELOW_TIERS},
    "rpc": {"scheduler", "executor", *_BELOW_TIERS},
    # The local failure drills: drive real processes from outside, read state through the store.
    "drill": _BELOW_TIERS,
    # Tier logic: on store and domain, never on each other.
    "scheduler": _BELOW_TIERS,
    "executor": _BELOW_TIERS,
    "store": {"domain", "foundation", "errors"},
    # Pure: raises our exceptions and nothing else of ours.
    "domain": {"errors"},
    # Config, observability, duties: used by every layer, so they use none.
    "foundation": {"errors"},
    "errors": set(),
}

DATABASE_DRIVERS = ("sqlalchemy", "psycopg", "psycopg2", "asyncpg")
GENERATED = "kairos_sdk._proto"
# Where the server uses the tenant SDK: the rpc layer, `kairos worker`, the delivery signature
# whose format both sides must agree on, and the drills' worker (it plays a tenant).
SDK_USERS = ("app.rpc", "app.cli.worker", "app.executor.signing", "app.drill.tenant_worker")


@dataclass(frozen=True)
class Import:
    module: str  # the importing module, dotted
    target: str  # what it imports, dotted
    line: int


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> list[Import]:
    """Every import in ``source``, wherever it is, with relative ones resolved."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                stem = ".".join([*base, node.module] if node.module else base)
            else:
                stem = node.module or ""
            # `from app import errors` imports app.errors; `from app.x import name` imports app.x.
            if stem == "app":
                found += [Import(module, f"app.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append(Import(module, stem, node.lineno))
    return found


def layer(dotted: str) -> str | None:
    parts = dotted.split(".")
    if parts[0] != "app" or len(parts) < 2:
        return None
    return LAYER_OF.get(parts[1], "?")


def _within(dotted: str, prefixes: tuple[str, ...]) -> bool:
    return any(dotted == p or dotted.startswith(p + ".") for p in prefixes)


# What a tier may not touch on the objects app/store hands out: the engine behind a Database, or
# statements run past the Store's typed methods.
STORE_INTERNALS = frozenset({"engine", "execute", "exec_driver_sql", "_conn"})
# Where statements run on a connection: the store, and the drills' reads of their own catalogue
# (sql/drill; direct SQL for an operator's tool, never on the production Store).
DIRECT_SQL = ("app.store", "app.drill.reads")


def seam_bypasses(source: str) -> list[int]:
    """Lines reaching past the seam: ``db.engine``, ``x.execute(...)``, a table's ``_conn``."""
    return sorted(
        {
            node.lineno
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Attribute) and node.attr in STORE_INTERNALS
        }
    )


def violations(root: Path) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root)
        where = f"{path.relative_to(root.parent)}"
        own = layer(module)
        if module != "app" and own == "?":
            found.append(f"{where}: {module} is in no layer (add it to LAYER_OF)")
            continue
        if not _within(module, DIRECT_SQL):
            found.extend(
                f"{where}:{line}: reaches past the Store (engine, execute, _conn); only {DIRECT_SQL} may"
                for line in seam_bypasses(path.read_text())
            )
        for imp in imports_of(path.read_text(), module, path.name == "__init__.py"):
            at = f"{where}:{imp.line}"
            if _within(imp.target, DATABASE_DRIVERS) and not _within(module, ("app.store",)):
                found.append(f"{at}: imports {imp.target}; only app/store talks to the database driver")
            elif _within(imp.target, (GENERATED,)) and not _within(module, ("app.rpc",)):
                found.append(f"{at}: imports {imp.target}; only app/rpc uses the generated modules")
            elif _within(imp.target, ("kairos_sdk",)) and not _within(module, SDK_USERS):
                found.append(f"{at}: imports {imp.target}; the server uses the SDK only from {SDK_USERS}")
            target = layer(imp.target)
            if target is None or own is None or target == own:
                continue
            if target == "?":
                found.append(f"{at}: imports {imp.target}, which is in no layer")
            elif target not in ALLOWED[own]:
                found.append(
                    f"{at}: {own} imports {target} ({imp.target}); {own} may use "
                    f"{', '.join(sorted(ALLOWED[own])) or 'nothing of ours'}"
                )
    return found


def test_the_table_names_every_layer() -> None:
    assert set(ALLOWED) == set(LAYER_OF.values())
    for allowed in ALLOWED.values():
        assert allowed <= set(ALLOWED)


def test_every_package_under_app_has_a_layer() -> None:
    names = {p.stem for p in APP.glob("*.py") if p.stem != "__init__"}
    names |= {p.parent.name for p in APP.glob("*/__init__.py")}
    assert names - set(LAYER_OF) == set()


def test_nothing_points_up_or_sideways() -> None:
    assert violations(APP) == []


def test_layers_form_no_cycle() -> None:
    def reaches(start: str, goal: str, seen: frozenset[str] = frozenset()) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in ALLOWED[start])

    assert [name for name in ALLOWED if reaches(name, name)] == []


@pytest.mark.parametrize(
    ("path", "source", "complaint"),
    [
        ("executor/service.py", "from app.rpc import server\n", "executor imports rpc"),
        ("rpc/servicer.py", "def f():\n    from app.api import app\n", "rpc imports api"),
        ("scheduler/x.py", "from app.executor.batching import Outcomes\n", "scheduler imports executor"),
        ("store/jobs.py", "from app import observability\nfrom app.scheduler import heap\n", "store imports scheduler"),
        ("domain/jobs.py", "from app.config import load\n", "domain imports foundation"),
        ("domain/jobs.py", "from app.store import db\n", "domain imports store"),
        ("duties.py", "import app.store.db\n", "foundation imports store"),
        ("api/service.py", "from sqlalchemy.ext.asyncio import AsyncConnection\n", "only app/store"),
        ("executor/pools.py", "import psycopg\n", "only app/store"),
        ("cli/worker.py", "from kairos_sdk._proto import worker_pb2\n", "only app/rpc"),
        ("scheduler/x.py", "from kairos_sdk.worker import Worker\n", "uses the SDK only"),
        ("executor/reaper.py", "from ..rpc import servicer\n", "executor imports rpc"),
        ("tools.py", "", "in no layer"),
        (
            "api/service.py",
            "async def f(db):\n    async with db.engine.connect() as c:\n        pass\n",
            "past the Store",
        ),
        ("scheduler/x.py", "async def f(tx):\n    await tx.jobs._conn.execute('SELECT 1')\n", "past the Store"),
        ("drill/scenarios.py", "async def f(tx):\n    await tx._conn.execute('SELECT 1')\n", "past the Store"),
        ("drill/reads.py", "import sqlalchemy\n", "only app/store"),
    ],
)
def test_the_check_catches(tmp_path: Path, path: str, source: str, complaint: str) -> None:
    root = tmp_path / "app"
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(source)
    found = violations(root)
    assert any(complaint in v for v in found), found


def test_the_check_allows_the_direction(tmp_path: Path) -> None:
    root = tmp_path / "app"
    for path, source in {
        "cli/__init__.py": "from app.rpc.server import GrpcTransport\nfrom app.api import server\n",
        "rpc/servicer.py": "from app.executor.batching import Outcomes\nfrom kairos_sdk._proto import worker_pb2\n",
        "executor/service.py": "from app import duties, errors\nfrom app.store.db import Database\n",
        "store/db.py": "from sqlalchemy import text\nfrom app.domain import states\n",
        "store/jobs.py": "async def get(self):\n    return await self._conn.execute(q('JobGet'))\n",
        "api/service.py": "async def f(db):\n    return await db.transaction(lambda tx: tx.jobs.get())\n",
        "drill/reads.py": "async def f(self):\n    return await self._conn.execute(statement('DrillDueOf'))\n",
        "domain/jobs.py": "from app.errors import InvalidInput\nfrom . import schedule\n",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(source)
    assert violations(root) == []


def test_the_production_store_holds_no_drill_tables() -> None:
    """The drills' reads are bound to a transaction by the drills (``Store.bind``), never carried by
    every production ``Store``."""
    from app.store import Store

    assert {"drill", "replication"} & set(Store.__slots__) == set()


def module_imports(root: Path) -> dict[str, set[str]]:
    """module -> the modules under ``root`` it imports: at module level, inside functions and under
    TYPE_CHECKING alike; ``from package import name`` counts as the module ``package.name`` when it is one."""
    paths = {module_name(path, root): path for path in root.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        is_package = path.name == "__init__.py"
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = module.split(".")
                if node.level:
                    base = base[: len(base) - node.level + (1 if is_package else 0)]
                    stem = ".".join([*base, node.module] if node.module else base)
                else:
                    stem = node.module or ""
                for alias in node.names:
                    targets.add(f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in paths else stem)
        graph[module] = {t for t in targets if t in paths and t != module}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The groups of modules that reach each other through imports (strongly connected, two or more)."""
    reach: dict[str, set[str]] = {m: set() for m in graph}
    for start, imported in graph.items():
        todo = list(imported)
        while todo:
            m = todo.pop()
            if m not in reach[start]:
                reach[start].add(m)
                todo.extend(graph[m])
    groups: list[set[str]] = []
    for m in sorted(graph):
        group = {m} | {n for n in reach[m] if m in reach[n]}
        if len(group) > 1 and group not in groups:
            groups.append(group)
    return groups


# The one ring left: the key and quota caches in app/store/tenants.py take a Database, whose Store
# (seam.py) holds the tenants and pools tables.
KNOWN_CYCLES = [{"app.store.db", "app.store.pools", "app.store.seam", "app.store.tenants"}]


def test_no_new_import_cycle_in_app() -> None:
    assert [c for c in import_cycles(module_imports(APP)) if c not in KNOWN_CYCLES] == []


def test_the_cycle_check_catches_a_ring(tmp_path: Path) -> None:
    root = tmp_path / "app"
    for path, source in {
        "__init__.py": "",
        "drill/__init__.py": "",
        "drill/scenarios.py": "def f():\n    from app.drill.patroni_failover import g\n",
        "drill/patroni_failover.py": "from app.drill import scenarios\n",
        "store/__init__.py": "",
        "store/db.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .seam import Store\n",
        "store/seam.py": "from app.store.db import Database\n",
        "store/table.py": "from app.store import db\n",
    }.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(source)
    assert sorted(map(sorted, import_cycles(module_imports(root)))) == [
        ["app.drill.patroni_failover", "app.drill.scenarios"],
        ["app.store.db", "app.store.seam"],
    ]
