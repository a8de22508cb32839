"""The ``kairos`` console entry point run in this process, as a shell would run it.

Running ``app.cli.run`` itself (not click's CliRunner) keeps the exit codes and the one-line errors
the real command gives; ``child`` runs ``python -m app.cli`` as its own process for what only a
separate process shows.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)

    @property
    def error_line(self) -> str:
        lines = self.err.strip().splitlines()
        assert len(lines) == 1, f"one line on stderr, got: {self.err!r}"
        assert lines[0].startswith("error: "), lines[0]
        return lines[0]


def run_kairos(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    *args: str,
    stdin: str | None = None,
    env: Mapping[str, str | None] | None = None,
) -> Result:
    """``kairos ARGS`` with ``stdin`` and ``env`` on top of this process's environment (a None value
    unsets that variable); the exit code and what it wrote. The environment is restored afterwards."""
    from app.cli import run as entry_point

    capsys.readouterr()
    with monkeypatch.context() as scoped:
        scoped.setattr(sys, "argv", ["kairos", *args])
        scoped.setattr(sys, "stdin", io.StringIO(stdin or ""))
        for name, value in (env or {}).items():
            if value is None:
                scoped.delenv(name, raising=False)
            else:
                scoped.setenv(name, value)
        try:
            entry_point()
            code = 0
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 1)
    out, err = capsys.readouterr()
    return Result(code, out, err)


def child(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m app.cli ARGS`` as its own process, with ``env`` and none of this process's KAIROS_ variables."""
    full = {**{k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}, **env}
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args], env=full, capture_output=True, text=True, timeout=60
    )
