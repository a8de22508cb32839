"""End to end through `kairos up` and `kairos worker`: a buffer_one job whose run outlasts two intervals keeps
one occurrence waiting, which starts once the run ends, and records the other as skipped (overlap)."""

from __future__ import annotations

import signal
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_the_buffered_occurrence_starts_when_the_running_one_ends(tmp_path: Path) -> None:
    worker = None
    with kairos_up(tmp_path) as up:
        try:
            with open(tmp_path / "worker.log", "wb") as sink:
                # Each run takes 22 s: runs every 10 s overlap by two occurrences.
                worker = subprocess.Popen(
                    [sys.executable, "-m", "app.cli", "worker", "--pool", "slow", "--", "sleep", "22"],
                    env={**up.env, "KAIROS_API_KEY": up.key, "KAIROS_GRPC_ADDR": up.grpc_addr},
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            with httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as api:
                made = api.post(
                    "/v1/jobs",
                    json={
                        "name": "slow",
                        "target": {"type": "queue", "ref": "slow"},
                        "schedule": {"every": "10s"},
                        "concurrency": "buffer_one",
                    },
                )
                assert made.status_code == 201, made.text
                job_id = made.json()["jobId"]

                def second_started() -> list | None:
                    history = sorted(api.get(f"/v1/jobs/{job_id}/executions").json(), key=lambda e: e["scheduledFor"])
                    ok = len(history) >= 3 and history[0]["state"] == "succeeded" and history[1]["startedAt"]
                    return history if ok else None

                first, second, third, *_ = wait_for(
                    second_started, timeout_s=75, interval_s=0.5, what="the buffered occurrence to start"
                )
                assert _at(second["startedAt"]) >= _at(first["finishedAt"])  # it waited for the first to end
                assert (third["state"], third["skipReason"]) == ("skipped", "overlap")  # one waits, at most
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    worker.kill()
