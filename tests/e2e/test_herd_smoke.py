"""Smoke run of loadtest/herd.py: a tiny herd and light load, every tier a real process.

Checks the benchmark itself end to end (it starts, measures from the database, stops what it
started) and the correctness figures it reads back: nothing lost, nothing run twice.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_herd_smoke(tmp_path: Path) -> None:
    results = tmp_path / "results"
    cmd = [
        sys.executable,
        str(ROOT / "loadtest" / "herd.py"),
        "--scenarios",
        "herd10k,light",
        "--herd10k-jobs",
        "300",
        "--light-burst",
        "20",
        "--light-spaced",
        "10",
        "--light-gap-ms",
        "50",
        "--workers",
        "2",
        "--executors",
        "2",
        "--worker-concurrency",
        "64",
        "--lead-min",
        "2",
        "--drain-timeout",
        "20",
        "--deadline",
        "100",
        "--results-dir",
        str(results),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    files = list(results.glob("herd-*.json"))
    assert len(files) == 1, proc.stdout[-2000:]
    doc = json.loads(files[0].read_text())
    for name, jobs in (("herd10k", 300), ("light", 30)):
        scenario = doc["scenarios"][name]
        assert "error" not in scenario, scenario
        c = scenario["correctness"]
        assert c["jobs"] == jobs, c
        assert c["lostJobs"] == 0, c
        assert c["duplicateExecutions"] == 0 and c["extraAttempts"] == 0, c
        assert c["notStarted"] == 0 and c["notSucceeded"] == 0, c
        lags = scenario["startLagS"] if name == "herd10k" else scenario["all"]["startLagS"]
        assert lags["n"] == jobs, lags
    lag = doc["scenarios"]["herd10k"]["startLagS"]
    assert 0 <= lag["min"] <= lag["max"] < 20, lag  # measured from the database: started after T, bounded
    rows = {(r["scenario"], r["figure"]) for r in doc["table"]}
    assert ("herd10k", "lost (jobs with no succeeded execution)") in rows
    loop_ms = doc["meta"]["pythonLoopMs"]
    assert set(loop_ms) == {"start", "end"} and all(ms > 0 for ms in loop_ms.values()), loop_ms
    assert "Kairos herd benchmark" in proc.stdout
