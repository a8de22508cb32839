"""A bad KAIROS_* value stops a real `kairos` process with one line and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


def kairos(tmp_path: Path, *args: str, **variables: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update({"KAIROS_HOME": str(tmp_path / "home"), **variables})
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("args", "variables", "line"),
    [
        (("api",), {"KAIROS_API_PORT": "abc"}, "error: KAIROS_API_PORT must be an integer 1-65535, got 'abc'"),
        (
            ("db", "upgrade"),
            {"KAIROS_DB_ISOLATION": "snapshot"},
            "error: KAIROS_DB_ISOLATION must be one of SERIALIZABLE, REPEATABLE READ, READ COMMITTED, got 'snapshot'",
        ),
        (
            ("scheduler",),
            {"KAIROS_DISPATCH_AHEAD_S": "-1"},
            "error: KAIROS_DISPATCH_AHEAD_S must be a number >= 0, got '-1'",
        ),
        (
            ("worker", "--pool", "p", "--", "true"),
            {"KAIROS_LOG_FORMAT": "xml", "KAIROS_API_KEY": "k"},
            "error: KAIROS_LOG_FORMAT must be one of json, text, got 'xml'",
        ),
    ],
)
def test_bad_setting_is_one_line_and_exit_code_2(
    tmp_path: Path, args: tuple[str, ...], variables: dict[str, str], line: str
) -> None:
    done = kairos(tmp_path, *args, **variables)
    assert done.returncode == 2, done.stderr
    assert done.stderr == line + "\n"
    assert done.stdout == ""
    assert not (tmp_path / "home").exists()  # stopped before it started anything
