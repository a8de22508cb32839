"""End to end through `kairos up`: an http job and a queue job (served by `kairos worker`) both succeed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[dict]]]:
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            received.append({"headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()
    server.server_close()


def test_http_and_queue_jobs_succeed_through_kairos_up(tmp_path: Path, receiver) -> None:
    hook, received = receiver
    api_port, grpc_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update({"KAIROS_HOME": str(tmp_path / "home"), "KAIROS_API_PORT": str(api_port),
                "KAIROS_GRPC_PORT": str(grpc_port), "KAIROS_HTTP_EGRESS_ALLOW": "127.0.0.1",
                "PYTHONUNBUFFERED": "1"})
    up = subprocess.Popen([sys.executable, "-m", "app.cli", "up"], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
    worker = None
    output: list[str] = []
    try:
        key = None
        deadline = time.monotonic() + 90
        while key is None and time.monotonic() < deadline:
            line = up.stdout.readline()
            if not line and up.poll() is not None:
                break
            output.append(line)
            if m := re.search(r"demo key\s+(\S+)", line):
                key = m.group(1)
        assert key, "".join(output)
        # Keep draining up's output so it never blocks on a full pipe.
        threading.Thread(target=lambda: output.extend(up.stdout), daemon=True).start()

        worker_log = tmp_path / "worker.log"
        with open(worker_log, "wb") as sink:
            # `cat` echoes the payload back: it becomes the execution's result.
            worker = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "worker", "--pool", "e2e-pool", "--", "cat"],
                env={**env, "KAIROS_API_KEY": key, "KAIROS_GRPC_ADDR": f"127.0.0.1:{grpc_port}"},
                stdout=sink, stderr=subprocess.STDOUT)
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=f"http://127.0.0.1:{api_port}", headers=headers, timeout=10) as api:
            jobs = {}
            for kind, target, payload in (("http", {"type": "http", "ref": hook}, {"kind": "http"}),
                                          ("queue", {"type": "queue", "ref": "e2e-pool"}, {"kind": "queue"})):
                r = api.post("/v1/jobs", json={"name": f"e2e-{kind}", "target": target, "payload": payload,
                                               "schedule": {"delaySeconds": 1},
                                               "retry": {"maxAttempts": 3, "backoffSeconds": 1}})
                assert r.status_code == 201, r.text
                jobs[kind] = r.json()["jobId"]

            def succeeded(job_id: str):
                history = api.get(f"/v1/jobs/{job_id}/executions").json()
                return history if history and history[0]["state"] == "succeeded" else None

            for kind, job_id in jobs.items():
                [run] = wait_for(lambda: succeeded(job_id), timeout_s=60, interval_s=0.2,
                                 what=f"the {kind} job to succeed")
                assert run["attempt"] == 1 and run["startedAt"] and run["finishedAt"]
                attempts = api.get(f"/v1/executions/{run['executionId']}/attempts").json()
                assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "succeeded")]
                expected = {"status": 200} if kind == "http" else {"kind": "queue"}
                assert attempts[0]["result"] == expected
        [delivery] = received
        assert json.loads(delivery["body"]) == {"kind": "http"}
        assert delivery["headers"]["idempotency-key"].startswith(f"{jobs['http']}:")
        assert delivery["headers"]["kairos-signature"].startswith("t=")
    finally:
        if worker is not None:
            worker.send_signal(signal.SIGTERM)
            try:
                worker.wait(timeout=20)
            except subprocess.TimeoutExpired:
                worker.kill()
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=40)
        except subprocess.TimeoutExpired:
            up.kill()
            up.wait()
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-2000:]
    assert up.returncode == 0, "".join(output)[-3000:]
