"""`kairos up --demo` from nothing: embedded database, all tiers, the demo job delivered, clean stop."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, wait_for

pytestmark = pytest.mark.slow


def test_up_serves_the_api_delivers_the_demo_job_and_stops_cleanly(tmp_path: Path) -> None:
    home = tmp_path / "home"
    api_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if k != "KAIROS_DATABASE_URL"}
    env.update({"KAIROS_HOME": str(home), "KAIROS_API_PORT": str(api_port), "KAIROS_GRPC_PORT": str(grpc_port)})
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "up", "--demo"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    output: list[str] = []
    try:
        key = None
        deadline = time.monotonic() + 90
        while key is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line and proc.poll() is not None:
                break
            output.append(line)
            if m := re.search(r"demo key\s+(\S+)", line):
                key = m.group(1)
        assert key, "".join(output)
        text = "".join(output)
        assert f"http://127.0.0.1:{api_port}" in text and f"127.0.0.1:{grpc_port}" in text
        api = f"http://127.0.0.1:{api_port}"
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=api, headers=headers, timeout=10) as client:
            jobs = wait_for(lambda: client.get("/v1/jobs").json()["jobs"], timeout_s=20, what="the demo job")
            demo = jobs[0]
            assert demo["name"] == "demo-echo"

            def delivered():
                history = client.get(f"/v1/jobs/{demo['jobId']}/executions").json()
                return history and history[0]["state"] == "succeeded" and history

            history = wait_for(delivered, timeout_s=40, interval_s=0.2, what="the demo job to succeed")
            assert history[0]["attempt"] == 1

            body = {"name": "cli-smoke", "target": {"type": "queue", "ref": "smoke"}, "payload": {},
                    "schedule": {"cron": "*/10 * * * *", "tz": "UTC"}}
            job_id = client.post("/v1/jobs", json=body).json()["jobId"]
            assert client.post(f"/v1/jobs/{job_id}:pause").json()["state"] == "paused"
            assert client.post(f"/v1/jobs/{job_id}:resume").json()["state"] == "active"
            assert client.delete(f"/v1/jobs/{job_id}").status_code == 204
            preview = client.get("/v1/schedules/preview", params={"cron": "0 9 * * *", "tz": "UTC", "count": 2})
            assert len(preview.json()["fireTimes"]) == 2
        assert (home / "demo.key").read_text().strip() == key

        # Another command with the same KAIROS_HOME joins the same embedded database.
        made = subprocess.run([sys.executable, "-m", "app.cli", "tenants", "create", "second", "--json"], env=env,
                              capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        second_key = json.loads(made.stdout)["apiKey"]
        assert httpx.get(f"{api}/v1/jobs", headers={"Authorization": f"Bearer {second_key}"}).json()["jobs"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            rest, _ = proc.communicate(timeout=40)
        except subprocess.TimeoutExpired:
            proc.kill()
            rest, _ = proc.communicate()
    assert proc.returncode == 0, "".join(output) + rest
    assert "Kairos stopped." in rest
    wait_for(lambda: not (home / "pgdata" / "postmaster.pid").exists(), timeout_s=20,
             what="the embedded PostgreSQL to stop")
