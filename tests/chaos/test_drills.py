"""Each `kairos drill` runs briefly as a real command (small sizes, bounded) and reports its lines.

The drills start PostgreSQL from the installed binaries and real Kairos processes; each must end
within its --timeout, print takeover time, lost, duplicated and the time until start lag is back
under 2 s, lose nothing owed, exit 0, and leave nothing running behind it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.drill.cluster import PG_BIN_DEFAULT
from tests.chaos.conftest import left_running

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not (PG_BIN_DEFAULT / "postgres").exists(), reason="no PostgreSQL 15 binaries"),
]

SMALL = ["--herd", "150", "--steady", "5", "--recurring", "2", "--warmup", "2", "--observe", "2", "--timeout", "80"]


def kairos() -> list[str]:
    script = Path(sys.executable).parent / "kairos"
    return [str(script)] if script.exists() else [sys.executable, "-m", "app.cli"]


def drill(*args: str) -> dict[str, str]:
    # --keep leaves the drill's directory (and names it), so the test can tell none of its processes is left.
    done = subprocess.run([*kairos(), "drill", *args, *SMALL, "--keep"], capture_output=True, text=True, timeout=90)
    lines = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    directory = lines.get("logs")
    try:
        assert done.returncode == 0, done.stdout + done.stderr
        for key in ("takeover time", "lost", "duplicated", "lag back under 2 s"):
            assert key in lines, done.stdout
        assert lines["lost"] == "0", done.stdout
        assert directory, done.stdout
        assert left_running(directory) == []
    finally:
        if directory:
            shutil.rmtree(directory, ignore_errors=True)
    return lines


@pytest.mark.timeout(100)
def test_region_failover_loses_nothing_with_synchronous_replication() -> None:
    lines = drill("region-failover")
    assert lines["drill"] == "region-failover (synchronous replication)"
    assert "us-east owns 256/256 shards" in lines["takeover time"]
    assert lines["missing after failover"].startswith("0 of ")


@pytest.mark.timeout(100)
def test_scheduler_kill_hands_every_shard_to_the_survivor() -> None:
    lines = drill("scheduler-kill")
    assert "scheduler-2 owns 256/256 shards" in lines["takeover time"]


@pytest.mark.timeout(100)
def test_worker_stall_retries_elsewhere_and_refuses_the_late_outcomes() -> None:
    lines = drill("worker-stall")
    refused, held = lines["late outcomes refused"].split(" (")[0].split(" of ")
    assert int(held) > 0 and refused == held, lines["late outcomes refused"]
    assert int(lines["duplicated"].split()[0]) == int(held)  # exactly the stalled worker's runs, run again
