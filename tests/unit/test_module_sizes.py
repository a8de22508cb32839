"""No module of app/ holds more than 600 lines: a file that grows past it is split into private
modules behind a small facade (docs/architecture.md)."""

from __future__ import annotations

from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"
MAX_LINES = 600


def test_no_module_in_app_is_over_600_lines() -> None:
    sizes = {p.relative_to(APP.parent).as_posix(): len(p.read_text().splitlines()) for p in APP.rglob("*.py")}
    assert sizes, "no modules found"
    assert {path: n for path, n in sizes.items() if n > MAX_LINES} == {}
