"""The docs name what exists: each ``path (name)`` of docs/architecture.md resolves, and the README lists
every page under docs/."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"

# `app/store/db.py` (`Database.transaction`): a path in backticks, then a parenthesis naming what is in it.
REFERENCE = re.compile(r"`(?P<path>[A-Za-z0-9_./-]+\.(?:py|sql))`\s*\((?P<names>[^)]*)\)")
TICKED = re.compile(r"`([^`]+)`")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)?")
QUERY_NAME = re.compile(r"^-- name: (\w+)", re.MULTILINE)


def query_names() -> set[str]:
    return {name for path in (ROOT / "sql" / "queries").glob("*.sql") for name in QUERY_NAME.findall(path.read_text())}


def defined(tree: ast.Module) -> dict[str, set[str]]:
    """Each name defined at the top of a module -> the names defined in its body (a class's methods)."""
    found: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found[node.name] = set()
        elif isinstance(node, ast.ClassDef):
            members: set[str] = set()
            for inner in node.body:
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(inner.name)
                elif isinstance(inner, ast.AnnAssign) and isinstance(inner.target, ast.Name):
                    members.add(inner.target.id)
            found[node.name] = members
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name):
                    found[target.id] = set()
    return found


def unresolved(text: str, root: Path) -> list[str]:
    """The references of ``text`` whose file is missing or which name nothing the file (or the SQL
    catalogue, for a statement the module runs) defines."""
    queries = query_names()
    missing: list[str] = []
    for match in REFERENCE.finditer(text):
        path = root / match["path"]
        if not path.exists():
            if "/" in match["path"]:
                missing.append(f"{match['path']}: no such file")
            continue  # a bare file name, relative to a directory the sentence names
        source = path.read_text()
        names = defined(ast.parse(source)) if path.suffix == ".py" else {}
        for ticked in TICKED.findall(match["names"]):
            if "/" in ticked or ticked.endswith((".py", ".sql")):
                if not (root / ticked).exists() and not (path.parent / ticked).exists():
                    missing.append(f"{match['path']} ({ticked}): no such file")
                continue
            if not IDENTIFIER.fullmatch(ticked):
                continue
            owner, _, member = ticked.partition(".")
            if path.suffix == ".sql":
                ok = re.search(rf"^-- name: {re.escape(ticked)}\b", source, re.MULTILINE) is not None
            elif owner in names:
                ok = not member or member in names[owner]
            elif not member and any(owner in members for members in names.values()):
                ok = True  # a method, named without its class where the sentence says which
            else:
                ok = ticked in queries  # a statement of the SQL catalogue the module runs
            if not ok:
                missing.append(f"{match['path']} ({ticked})")
    return missing


def test_every_path_and_name_in_the_architecture_page_exists() -> None:
    assert unresolved(ARCHITECTURE.read_text(), ROOT) == []


def test_a_reference_to_a_name_that_is_gone_is_found() -> None:
    text = (
        "`app/api/jobs/create_route.py` (`CreateJobRoute`, `FastCreateJob`) and `app/store/db.py`\n"
        "(`Database.transaction`, `Database.nowhere`) and `app/api/service.py` (`create_job`)"
    )
    assert unresolved(text, ROOT) == [
        "app/api/jobs/create_route.py (FastCreateJob)",
        "app/store/db.py (Database.nowhere)",
        "app/api/service.py: no such file",
    ]


def test_the_readme_lists_every_page_of_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    listed = set(re.findall(r"\]\((docs/[^)#]+\.md)\)", readme.split("## Documentation", 1)[1].split("\n## ", 1)[0]))
    pages = {f"docs/{page.name}" for page in (ROOT / "docs").glob("*.md")}
    assert sorted(pages - listed) == []
