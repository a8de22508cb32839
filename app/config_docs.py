"""The settings tables of docs/configuration.md, rendered from the fields of ``app.config``'s settings.

python -m app.config_docs --markdown                  # print them
python -m app.config_docs --write docs/configuration.md  # update the marked tables in place
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from dataclasses import fields
from pathlib import Path

from app.config import SECTIONS, Settings, WorkerSettings


def markdown_table(section: str) -> str:
    """The table of one section's variables, as docs/configuration.md shows it."""
    cls = WorkerSettings if section == "worker" else Settings
    rows = ["| variable | default | allowed | meaning |", "|---|---|---|---|"]
    for f in fields(cls):
        meta = f.metadata
        if meta["section"] == section:
            rows.append(f"| `{meta['variable']}` | {meta['shown']} | {meta['parser'].allowed} | {meta['doc']} |")
    return "\n".join(rows)


def _marker(section: str) -> tuple[str, str]:
    return f"<!-- settings:{section} -->", f"<!-- /settings:{section} -->"


def _verbatim(text: str) -> Callable[[re.Match[str]], str]:
    """A replacement for ``re.sub`` that inserts ``text`` as it is (no backslash escapes read)."""
    return lambda _match: text


def render_docs(document: str) -> str:
    """``document`` with each marked settings table replaced by the one the fields describe."""
    for section in SECTIONS:
        begin, end = _marker(section)
        pattern = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.DOTALL)
        if not pattern.search(document):
            raise ValueError(f"no {begin} ... {end} block")
        document = pattern.sub(_verbatim(f"{begin}\n{markdown_table(section)}\n{end}"), document)
    return document


def main(argv: list[str]) -> int:
    if argv == ["--markdown"]:
        for section, title in SECTIONS.items():
            begin, end = _marker(section)
            print(f"## {title}\n\n{begin}\n{markdown_table(section)}\n{end}\n")
        return 0
    if len(argv) == 2 and argv[0] == "--write":
        path = Path(argv[1])
        path.write_text(render_docs(path.read_text()))
        return 0
    sys.stderr.write("usage: python -m app.config_docs --markdown | --write docs/configuration.md\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
