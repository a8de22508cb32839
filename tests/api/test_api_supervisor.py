"""`kairos api`'s supervisor stops when told to, whatever its workers are doing at that moment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import free_port
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def test_a_stop_during_a_workers_restart_back_off_stops_the_tier(database_url: str, tmp_path: Path) -> None:
    # A worker dies, the supervisor waits its back-off before starting another, and SIGTERM arrives
    # in that second: the supervisor must not start the new worker after all (nobody would tell it
    # to stop, and the supervisor would wait for it forever).
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_DATABASE_URL": database_url,
            "KAIROS_API_PORT": str(free_port()),
            "KAIROS_METRICS_PORT": str(free_port()),
            "KAIROS_METRICS_HOST": "127.0.0.1",
            "KAIROS_API_WORKERS": "2",
            "KAIROS_HOME": str(tmp_path / "home"),
            "KAIROS_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
    )
    log_path = tmp_path / "api.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env, stdout=out, stderr=subprocess.STDOUT)
    supervisor = psutil.Process(proc.pid)
    try:

        def workers() -> list[psutil.Process]:
            return [p for p in supervisor.children() if p.status() != psutil.STATUS_ZOMBIE]

        # Past the start-up window (a death inside it stops the tier on purpose).
        wait_for(
            lambda: len(workers()) == 2 and all(time.time() - p.create_time() > 6 for p in workers()),
            timeout_s=40,
            interval_s=0.2,
            what="two api workers past their start-up window",
        )
        before = {p.pid for p in workers()}
        os.kill(min(before), signal.SIGKILL)

        def restarting() -> bool:
            return any(
                json.loads(line).get("msg") == "api worker died; restarting"
                for line in log_path.read_text().splitlines()
                if line.startswith("{")
            )

        wait_for(restarting, timeout_s=10, interval_s=0.02, what="the supervisor to notice the death")
        proc.send_signal(signal.SIGTERM)  # within the one-second back-off
        assert proc.wait(timeout=20) == 0, log_path.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            for child in supervisor.children(recursive=True):
                child.kill()
            proc.kill()
            proc.wait()
