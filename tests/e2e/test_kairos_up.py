"""`kairos up --demo` from nothing: embedded database, all tiers, the demo job delivered, clean stop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def test_up_serves_the_api_delivers_the_demo_job_and_stops_cleanly(tmp_path: Path) -> None:
    with kairos_up(tmp_path, "--demo") as up:
        banner = up.text()
        assert up.api in banner and up.grpc_addr in banner
        with httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as client:
            jobs = wait_for(lambda: client.get("/v1/jobs").json()["jobs"], timeout_s=20, what="the demo job")
            demo = jobs[0]
            assert demo["name"] == "demo-echo"

            def delivered():
                history = client.get(f"/v1/jobs/{demo['jobId']}/executions").json()
                return history and history[0]["state"] == "succeeded" and history

            history = wait_for(delivered, timeout_s=40, interval_s=0.2, what="the demo job to succeed")
            assert history[0]["attempt"] == 1
            # The demo opens the API's own port to its echo job, and no other loopback port.
            elsewhere = {
                "name": "probe",
                "target": {"type": "http", "ref": "http://127.0.0.1:9/x"},
                "schedule": {"runAt": "2030-01-01T00:00:00Z"},
            }
            refused = client.post("/v1/jobs", json=elsewhere)
            assert refused.status_code == 422 and refused.json()["field"] == "/target/ref", refused.text

            body = {
                "name": "cli-smoke",
                "target": {"type": "queue", "ref": "smoke"},
                "payload": {},
                "schedule": {"cron": "*/10 * * * *", "tz": "UTC"},
            }
            job_id = client.post("/v1/jobs", json=body).json()["jobId"]
            assert client.post(f"/v1/jobs/{job_id}:pause").json()["state"] == "paused"
            assert client.post(f"/v1/jobs/{job_id}:resume").json()["state"] == "active"
            assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
            preview = client.get("/v1/schedules/preview", params={"cron": "0 9 * * *", "tz": "UTC", "count": 2})
            assert len(preview.json()["fireTimes"]) == 2
        assert (up.home / "demo.key").read_text().strip() == up.key

        # Another command with the same KAIROS_HOME joins the same embedded database.
        made = subprocess.run(
            [sys.executable, "-m", "app.cli", "tenants", "create", "second", "--json"],
            env=up.env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert made.returncode == 0, made.stderr
        second_key = json.loads(made.stdout)["apiKey"]
        assert httpx.get(f"{up.api}/v1/jobs", headers={"Authorization": f"Bearer {second_key}"}).json()["jobs"] == []
    assert up.proc.returncode == 0, up.text()
    wait_for(lambda: "Kairos stopped." in up.text(), timeout_s=5, what="the drain thread to read the last line")
    wait_for(
        lambda: not (up.home / "pgdata" / "postmaster.pid").exists(),
        timeout_s=20,
        what="the embedded PostgreSQL to stop",
    )


def test_up_restarts_a_tier_that_dies(tmp_path: Path) -> None:
    import psutil

    with kairos_up(tmp_path) as up:
        parent = psutil.Process(up.proc.pid)

        def scheduler_pid() -> int | None:
            for child in parent.children():
                try:
                    if child.status() != psutil.STATUS_ZOMBIE and "scheduler" in child.cmdline():
                        return child.pid
                except (psutil.NoSuchProcess, psutil.ZombieProcess):  # it died (or was reaped) as we looked
                    continue
            return None

        first = wait_for(scheduler_pid, timeout_s=20, what="the scheduler child")
        psutil.Process(first).kill()
        second = wait_for(
            lambda: (pid := scheduler_pid()) and pid != first and pid, timeout_s=30, what="a new scheduler child"
        )
        assert second != first
        with httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as client:
            body = {
                "name": "after-restart",
                "target": {"type": "queue", "ref": "later"},
                "payload": {},
                "schedule": {"delaySeconds": 1},
            }
            job_id = client.post("/v1/jobs", json=body).json()["jobId"]
            history = wait_for(
                lambda: client.get(f"/v1/jobs/{job_id}/executions").json(),
                timeout_s=30,
                interval_s=0.2,
                what="the job to be dispatched by the restarted scheduler",
            )
            assert history[0]["state"] == "ready"
    assert up.proc.returncode == 0, up.text()
