"""`kairos up --demo` with an allow list of the user's own, and a `kairos up` that fails after its children
started: the demo keeps its own port reachable, and a failure stops every child it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from tests.conftest import free_port
from tests.e2e.conftest import endpoint, kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def test_demo_delivers_its_job_whatever_the_allow_list_says(tmp_path: Path) -> None:
    with endpoint() as (hook, received):
        hook_port = hook.rsplit(":", 1)[1]
        with kairos_up(tmp_path, "--demo", KAIROS_HTTP_EGRESS_ALLOW=f"127.0.0.1:{hook_port}") as up:
            assert "demo job submitted" in up.text() or wait_for(
                lambda: "demo job submitted" in up.text(), timeout_s=20, what="the demo job"
            ), up.text()
            assert "Traceback" not in up.text()
            with httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as client:
                demo = client.get("/v1/jobs").json()["jobs"][0]

                def delivered():
                    history = client.get(f"/v1/jobs/{demo['jobId']}/executions").json()
                    return history and history[0]["state"] == "succeeded"

                wait_for(delivered, timeout_s=40, interval_s=0.2, what="the demo job to succeed")
                # The user's own entry is allowed too.
                mine = {
                    "name": "hook",
                    "target": {"type": "http", "ref": f"{hook}/x"},
                    "payload": {},
                    "schedule": {"delaySeconds": 1},
                }
                assert client.post("/v1/jobs", json=mine).status_code == 201
                wait_for(lambda: received, timeout_s=40, interval_s=0.2, what="the user's webhook")
        assert up.proc.returncode == 0, up.text()


def _ours(home: Path) -> list[psutil.Process]:
    """Live processes started with this KAIROS_HOME (the children and their own workers)."""
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.status() != psutil.STATUS_ZOMBIE and proc.environ().get("KAIROS_HOME") == str(home):
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def test_up_that_fails_after_starting_its_children_stops_every_one(tmp_path: Path) -> None:
    # A payload limit below the demo job's own payload: the tiers come up, the demo submission is refused.
    home = tmp_path / "home"
    api_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_HOME": str(home),
            "KAIROS_API_PORT": str(api_port),
            "KAIROS_GRPC_PORT": str(grpc_port),
            "KAIROS_PAYLOAD_MAX_BYTES": "8",
            "PYTHONUNBUFFERED": "1",
        }
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "app.cli", "up", "--demo"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=40)
        raise AssertionError(f"kairos up did not fail:\n{out}\n{err}") from None
    try:
        assert proc.returncode == 1, out + err
        assert "Traceback" not in err, err
        assert "Kairos is up" not in out, out
        lines = err.strip().splitlines()
        assert lines[-1].startswith("error: the demo job was refused: 422"), err
        assert wait_for(lambda: not _ours(home), timeout_s=10, what="every child to be gone") is True
    finally:
        for left in _ours(home):
            left.kill()
