"""The API tier's metrics and logs, from a real multi-process `kairos api`.

Three workers share the API port; a scrape of /metrics on either the API port (which lands on a
random worker) or the metrics port (the supervisor) must count every worker's requests, and keep
counting those of a worker that was killed. The log is JSON on every line, one line per request
with its route template, status, tenant and job, and never an API key or a signing secret.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from tests.api.conftest import TenantKey, make_tenant
from tests.conftest import free_port
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow
WORKERS = 3


@dataclass(frozen=True)
class Tier:
    url: str
    metrics_url: str
    database_url: str
    proc: subprocess.Popen
    log_path: Path

    def workers(self) -> list[psutil.Process]:
        return [
            p for p in psutil.Process(self.proc.pid).children() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        ]

    def metrics_dir(self) -> str:
        return self.workers()[0].environ()["KAIROS_API_METRICS_DIR"]

    def log_records(self) -> list[dict]:
        lines = [line for line in self.log_path.read_text().splitlines() if line.strip()]
        return [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def tier(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    port, metrics_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_DATABASE_URL": module_database_url,
            "KAIROS_API_PORT": str(port),
            "KAIROS_METRICS_PORT": str(metrics_port),
            "KAIROS_METRICS_HOST": "127.0.0.1",
            "KAIROS_API_WORKERS": str(WORKERS),
            "KAIROS_HOME": str(tmp_path_factory.mktemp("home")),
            "KAIROS_LOG_FORMAT": "json",
            "PYTHONUNBUFFERED": "1",
        }
    )
    log_path = tmp_path_factory.mktemp("logs") / "api.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "api"], env=env, stdout=out, stderr=subprocess.STDOUT)
    t = Tier(f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}", module_database_url, proc, log_path)

    def every_worker_answers() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"kairos api exited: {log_path.read_text()[-2000:]}")
        try:
            if httpx.get(f"{t.metrics_url}/readyz", timeout=2).status_code != 200:
                return False
            return len(list(Path(t.metrics_dir()).glob("[0-9]*.sock"))) == WORKERS
        except (httpx.HTTPError, IndexError, KeyError, psutil.Error):
            return False

    wait_for(every_worker_answers, timeout_s=40, interval_s=0.1, what="every kairos api worker")
    yield t
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        for child in psutil.Process(proc.pid).children(recursive=True):
            child.kill()
        proc.kill()
        proc.wait()
        raise AssertionError(f"kairos api did not stop on SIGTERM: {log_path.read_text()[-3000:]}") from None


def own_text(directory: str, pid: int) -> str:
    """One worker's own exposition, asked on its socket as the supervisor does."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(str(Path(directory) / f"{pid}.sock"))
        s.sendall(b"metrics\n")
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks).decode()


def sample(text: str, name: str, **labels: str) -> float:
    """The value of the one sample ``name{labels...}`` (labels given must match; others may exist); 0 if none."""
    found = []
    for m in re.finditer(rf"^{re.escape(name)}\{{([^}}]*)\}} (\S+)$", text, flags=re.MULTILINE):
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        if all(have.get(k) == v for k, v in labels.items()):
            found.append(float(m.group(2)))
    assert len(found) <= 1, f"{name}{labels} matches {len(found)} series"
    return found[0] if found else 0.0


ROUTE = {"route": "/v1/dead-letters", "method": "GET", "status": "200", "status_class": "2xx"}
COUNT = "kairos_http_request_duration_seconds_count"


def test_metrics_count_every_worker_and_survive_a_killed_one(tier: Tier) -> None:
    tenant = make_tenant(tier.database_url)
    n = 30
    for _ in range(n):  # a new connection each: the kernel spreads them over the workers
        assert httpx.get(f"{tier.url}/v1/dead-letters", headers=tenant.headers).status_code == 200
    directory = tier.metrics_dir()
    own = {p.pid: sample(own_text(directory, p.pid), COUNT, **ROUTE) for p in tier.workers()}
    assert sum(own.values()) == n, own
    assert sum(1 for c in own.values() if c) >= 2, f"the requests all reached one worker: {own}"

    tier_text = httpx.get(f"{tier.metrics_url}/metrics").text
    assert sample(tier_text, COUNT, **ROUTE) == n
    assert sample(tier_text, "kairos_http_request_duration_seconds_bucket", le="+Inf", **ROUTE) == n
    assert 0 < sample(tier_text, "kairos_http_request_duration_seconds_sum", **ROUTE) < n * 5
    for _ in range(6):  # whichever worker answers, the API port shows the same tier
        resp = httpx.get(f"{tier.url}/metrics")
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/plain")
        assert sample(resp.text, COUNT, **ROUTE) == n

    # Kill the busiest worker once it is past its start-up window (an earlier death stops the command).
    busiest = max(own, key=lambda pid: own[pid])
    wait_for(lambda: time.time() - psutil.Process(busiest).create_time() > 6, timeout_s=10, what="start-up window")
    os.kill(busiest, signal.SIGKILL)
    wait_for(
        lambda: (
            len(tier.workers()) == WORKERS
            and busiest not in {p.pid for p in tier.workers()}
            and len(list(Path(directory).glob("[0-9]*.sock"))) >= WORKERS - 1
        ),
        timeout_s=20,
        what="the supervisor to replace the killed worker",
    )
    assert sample(httpx.get(f"{tier.metrics_url}/metrics").text, COUNT, **ROUTE) == n  # never goes back
    for _ in range(3):
        assert httpx.get(f"{tier.url}/v1/dead-letters", headers=tenant.headers).status_code == 200
    assert sample(httpx.get(f"{tier.metrics_url}/metrics").text, COUNT, **ROUTE) == n + 3
    assert tier.proc.poll() is None


def test_one_json_line_per_request_and_no_credentials_in_the_log(tier: Tier) -> None:
    tenant: TenantKey = make_tenant(tier.database_url)
    secret, key = tenant.signing_secret, tenant.key
    with httpx.Client(base_url=tier.url, headers=tenant.headers, timeout=10) as api:
        # The secret and the key where a careless log would pick them up: body, query, headers.
        created = api.post(
            "/v1/jobs",
            json={
                "name": "logged",
                "target": {"type": "http", "ref": "https://example.com/h"},
                "payload": {"secret": secret, "key": key},
                "schedule": {"delaySeconds": 3600},
            },
            headers={"X-Debug": secret},
        )
        assert created.status_code == 201, created.text
        job_id = created.json()["jobId"]
        assert api.get(f"/v1/jobs/{job_id}", params={"note": secret}).status_code == 200
        assert api.post(f"/v1/jobs/{job_id}:pause").status_code == 200
    assert httpx.get(f"{tier.url}/v1/jobs", headers={"Authorization": f"Bearer {key}x"}).status_code == 401
    assert httpx.get(f"{tier.url}/v1/jobs", headers={"Authorization": f"Bearer {secret}"}).status_code == 401

    def lines_for(job: str) -> list[dict]:
        return [r for r in tier.log_records() if r.get("msg") == "request" and r.get("job_id") == job]

    mine = wait_for(
        lambda: len(lines_for(job_id)) >= 2 and lines_for(job_id), timeout_s=10, what="the request lines"
    )  # every line parses as JSON, or log_records raises
    got = {(r["method"], r["path"], r["status"]) for r in mine}
    assert got == {("GET", "/v1/jobs/{job_ref}", 200), ("POST", "/v1/jobs/{job_ref}", 200)}, got
    for r in mine:
        assert r["level"] == "info" and r["service"] == "api" and r["tenant_id"] == str(tenant.tenant_id)
        assert isinstance(r["duration_ms"], float | int) and r["duration_ms"] >= 0
    posts = [
        r
        for r in tier.log_records()
        if r.get("msg") == "request"
        and r.get("method") == "POST"
        and r.get("path") == "/v1/jobs"
        and r.get("tenant_id") == str(tenant.tenant_id)
    ]
    assert [r["status"] for r in posts] == [201]
    unauthorized = [r for r in tier.log_records() if r.get("msg") == "request" and r.get("status") == 401]
    assert unauthorized and all("tenant_id" not in r for r in unauthorized)
    assert any(r["logger"].startswith("uvicorn") for r in tier.log_records())  # uvicorn's own lines, as JSON

    text = tier.log_path.read_text()
    assert key not in text and secret not in text
