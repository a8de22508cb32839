"""End to end through `kairos up`: an http job and a queue job (served by `kairos worker`) both succeed."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kairos_sdk import verify_signature
from tests.e2e.conftest import Request, endpoint, kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Request]]]:
    with endpoint() as (base, received):
        yield f"{base}/hook", received


def test_http_and_queue_jobs_succeed_through_kairos_up(tmp_path: Path, receiver) -> None:
    hook, received = receiver
    worker = None
    with kairos_up(tmp_path, KAIROS_HTTP_EGRESS_ALLOW="127.0.0.1") as up:
        try:
            worker_log = tmp_path / "worker.log"
            with open(worker_log, "wb") as sink:
                # `cat` echoes the payload back: it becomes the execution's result.
                worker = subprocess.Popen(
                    [sys.executable, "-m", "app.cli", "worker", "--pool", "e2e-pool", "--report-ms", "2", "--", "cat"],
                    env={**up.env, "KAIROS_API_KEY": up.key, "KAIROS_GRPC_ADDR": up.grpc_addr},
                    stdout=sink,
                    stderr=subprocess.STDOUT,
                )
            with httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as api:
                jobs = {}
                for kind, target, payload in (
                    ("http", {"type": "http", "ref": hook}, {"kind": "http"}),
                    ("queue", {"type": "queue", "ref": "e2e-pool"}, {"kind": "queue"}),
                ):
                    r = api.post(
                        "/v1/jobs",
                        json={
                            "name": f"e2e-{kind}",
                            "target": target,
                            "payload": payload,
                            "schedule": {"delaySeconds": 1},
                            "retry": {"maxAttempts": 3, "backoffSeconds": 1},
                        },
                    )
                    assert r.status_code == 201, r.text
                    jobs[kind] = r.json()["jobId"]

                def succeeded(job_id: str):
                    history = api.get(f"/v1/jobs/{job_id}/executions").json()
                    return history if history and history[0]["state"] == "succeeded" else None

                for kind, job_id in jobs.items():
                    [run] = wait_for(
                        lambda: succeeded(job_id), timeout_s=60, interval_s=0.2, what=f"the {kind} job to succeed"
                    )
                    assert run["attempt"] == 1 and run["startedAt"] and run["finishedAt"]
                    attempts = api.get(f"/v1/executions/{run['executionId']}/attempts").json()
                    assert [(a["attempt"], a["outcome"]) for a in attempts] == [(1, "succeeded")]
                    expected = {"status": 200} if kind == "http" else {"kind": "queue"}
                    assert attempts[0]["result"] == expected
            [delivery] = received
            assert json.loads(delivery.body) == {"kind": "http"}
            assert delivery.headers["idempotency-key"].startswith(f"{jobs['http']}:")
            # Signed with the secret the banner printed: a receiver can verify it with what `kairos up` showed.
            assert up.signing_secret, up.text()
            assert verify_signature(up.signing_secret, delivery.headers["kairos-signature"], delivery.body)
        finally:
            if worker is not None:
                worker.send_signal(signal.SIGTERM)
                try:
                    worker.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    worker.kill()
    assert worker.returncode == 0, (tmp_path / "worker.log").read_text()[-2000:]
    assert up.proc.returncode == 0, up.text()[-3000:]
