"""loadtest/locustfile.py headless against a real `kairos up --demo`: requests succeed, due jobs start.

Two short Locust runs on one `kairos up`: the everyday mix for 10 s (delaySeconds of 1-3 s, so
jobs fall due during the run), then the herd shape with T pinned a few seconds ahead
(KAIROS_LOCUST_HERD_AT) instead of the next round minute. Each run's start-lag report is read
from KAIROS_LOCUST_REPORT_JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from tests.e2e.conftest import kairos_up

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"


def run_locust(
    env: dict[str, str], api: str, tmp_path: Path, name: str, *args: str, **settings: str
) -> tuple[subprocess.CompletedProcess, dict]:
    report = tmp_path / f"{name}.json"
    full_env = {
        **env,
        "KAIROS_LOCUST_TENANTS": "2",
        "KAIROS_LOCUST_REPORT_JSON": str(report),
        "KAIROS_LOCUST_REPORT_GRACE_S": "5",
        **settings,
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            str(LOCUSTFILE),
            "--headless",
            "-H",
            api,
            "--only-summary",
            "--stop-timeout",
            "3",
            *args,
        ],
        cwd=ROOT,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert report.exists(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(report.read_text())


def _why(proc: subprocess.CompletedProcess, report: dict) -> str:
    """What a failed run said: the start-lag part of its report first (Locust's tables come after it)."""
    lag = {k: report.get(k) for k in ("notStarted", "lag", "all")}
    at = proc.stdout.find("Start lag read back from Kairos")
    return (
        f"exit {proc.returncode}; report {json.dumps(lag, default=str)[:2000]}\n"
        f"{proc.stdout[max(0, at) :][:2000]}\n{proc.stderr[-2000:]}"
    )


def aggregated(report: dict) -> dict:
    return next(r for r in report["requests"] if r["name"] == "Aggregated")


def test_locust_users_succeed_and_report_start_lag(tmp_path: Path) -> None:
    with kairos_up(tmp_path, "--demo") as up:
        proc, report = run_locust(
            up.env,
            up.api,
            tmp_path,
            "mixed",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "10s",
            KAIROS_LOCUST_MAX_DELAY_S="3",
            KAIROS_LOCUST_WAIT="0.2,0.6",
        )
        assert proc.returncode == 0, _why(proc, report)
        total = aggregated(report)
        assert total["requests"] >= 30 and total["failures"] == 0, total
        submitted = sum(r["requests"] for r in report["requests"] if r["name"].startswith("/v1/jobs ["))
        assert submitted >= 4, report["requests"]
        delayed = report["lag"]["once-delay"]
        assert delayed["started"] >= 3 and delayed["dead"] == 0, delayed
        assert delayed["p99_s"] is not None and 0 <= delayed["p99_s"] < 5, delayed
        assert report["notStarted"] == 0, report
        assert "Start lag read back from Kairos" in proc.stdout

        herd_at = (datetime.now(timezone.utc) + timedelta(seconds=20)).replace(microsecond=0)
        proc, report = run_locust(
            up.env,
            up.api,
            tmp_path,
            "herd",
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "50s",
            KAIROS_LOCUST_SHAPE="herd",
            KAIROS_LOCUST_HERD_JOBS="5",
            KAIROS_LOCUST_HERD_HOLD_S="3",
            KAIROS_LOCUST_HERD_AT=herd_at.isoformat(),
        )
        assert proc.returncode == 0, _why(proc, report)
        herd = report["lag"]["herd"]
        assert herd["jobs"] == 20 and herd["started"] == 20, herd
        assert herd["first_due"] == herd["last_due"] == herd_at.isoformat(), herd
        assert aggregated(report)["failures"] == 0
