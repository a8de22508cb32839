"""`kairos worker` checks its command before it starts: missing or not executable is exit 2, one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import free_port


def _worker(*command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    # Nothing listens there: a worker that started anyway would retry until the timeout.
    env.update({"KAIROS_API_KEY": "k", "KAIROS_GRPC_ADDR": f"127.0.0.1:{free_port()}", "KAIROS_HOME": str(cwd)})
    try:
        return subprocess.run(
            [sys.executable, "-m", "app.cli", "worker", "--pool", "emails", "--", *command],
            env=env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=20,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(f"the worker started with {command!r}") from exc


@pytest.mark.parametrize("case", ["missing-path", "missing-name", "not-executable", "directory"])
def test_a_command_that_cannot_run_ends_the_worker_at_start(tmp_path: Path, case: str) -> None:
    script = tmp_path / "send-email.sh"
    if case == "not-executable":
        script.write_text("#!/bin/sh\nexit 0\n")
        script.chmod(0o644)
    command = {
        "missing-path": "./send-email.sh",
        "missing-name": "no-such-command-kairos",
        "not-executable": "./send-email.sh",
        "directory": str(tmp_path),
    }[case]
    done = _worker(command, "--flag", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and command in lines[0], done.stderr
    reason = {
        "missing-path": "not found",
        "missing-name": "not found on PATH",
        "not-executable": "not executable",
        "directory": "not a file",
    }[case]
    assert reason in lines[0], lines[0]
