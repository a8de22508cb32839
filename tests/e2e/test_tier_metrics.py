"""Metrics and probes of the scheduler and executor processes, scraped after a job ran through them.

`kairos up` gives the scheduler KAIROS_METRICS_PORT and the executor the next port and prints
both; a real HTTP job runs through api, scheduler and executor, then each tier's /metrics must
show it. A lone `kairos scheduler` answers /readyz 503 while its database refuses connections
(and 200 again after), and pushes its metrics to the OTLP endpoint it is given.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psycopg
import pytest

from app.store import embedded
from tests.conftest import free_port
from tests.e2e.conftest import Request, endpoint, kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


def series(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample of ``name``: (labels, value)."""
    return [
        (dict(re.findall(r'(\w+)="([^"]*)"', m.group(1) or "")), float(m.group(2)))
        for m in re.finditer(rf"^{re.escape(name)}(?:\{{([^}}]*)\}})? (\S+)$", text, flags=re.MULTILINE)
    ]


def value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels``."""
    return sum(v for have, v in series(text, name) if all(have.get(k) == w for k, w in labels.items()))


def two_free_ports() -> int:
    """A port p with p + 1 free as well (the scheduler's and the executor's under `kairos up`)."""
    for _ in range(50):
        p = free_port()
        if p < 65535:
            try:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p + 1))
                return p
            except OSError:
                continue
    raise AssertionError("no two adjacent free ports")


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Request]]]:
    with endpoint() as (base, received):
        yield f"{base}/hook", received


def test_scheduler_and_executor_metrics_after_a_job_ran(tmp_path: Path, receiver) -> None:
    hook, received = receiver
    port = two_free_ports()
    scheduler, executor = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"
    with kairos_up(
        tmp_path, KAIROS_HTTP_EGRESS_ALLOW="127.0.0.1", KAIROS_METRICS_PORT=str(port), KAIROS_METRICS_HOST="127.0.0.1"
    ) as up:
        assert f"scheduler {scheduler}/metrics" in up.text() and f"executor {executor}/metrics" in up.text()
        with httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as api:
            r = api.post(
                "/v1/jobs",
                json={
                    "name": "metered",
                    "target": {"type": "http", "ref": hook},
                    "payload": {"n": 1},
                    "schedule": {"delaySeconds": 1},
                },
            )
            assert r.status_code == 201, r.text
            job_id = r.json()["jobId"]
            wait_for(
                lambda: (h := api.get(f"/v1/jobs/{job_id}/executions").json()) and h[0]["state"] == "succeeded",
                timeout_s=30,
                interval_s=0.2,
                what="the job to succeed",
            )
        assert len(received) == 1

        for base in (scheduler, executor):
            assert httpx.get(f"{base}/healthz").status_code == 200
            assert httpx.get(f"{base}/readyz").json() == {"status": "ready"}
            assert httpx.get(f"{base}/nothing").status_code == 404

        text = httpx.get(f"{executor}/metrics").text
        assert value(text, "kairos_executions_total", outcome="succeeded") == 1
        assert value(text, "kairos_executions_leased_total", queue="http") == 1
        [(labels, count)] = [(lab, v) for lab, v in series(text, "kairos_start_lag_seconds_count") if v]
        assert count == 1 and labels["queue"] == "http" and re.fullmatch(r"[0-9a-f-]{36}", labels["tenant"])
        lag = value(text, "kairos_start_lag_seconds_sum")
        assert 0 <= lag < 5, lag  # leased within seconds of its due time
        assert value(text, "kairos_start_lag_seconds_bucket", le="5.0") == 1
        # The depth is a count refreshed every 5 s: one taken while the execution was still ready
        # reads 1 until the next, which must read 0.
        wait_for(
            lambda: (
                ({"pool": "@http", "kind": "http"}, 0.0)
                in series(httpx.get(f"{executor}/metrics").text, "kairos_ready_queue_depth")
            ),
            timeout_s=15,
            interval_s=0.2,
            what="the ready depth to read 0 after the lease",
        )

        text = httpx.get(f"{scheduler}/metrics").text
        assert value(text, "kairos_shards_owned") == 256
        assert value(text, "kairos_dispatch_executions_total") == 1
        assert value(text, "kairos_dispatch_lag_seconds_count", queue="http") == 1
        assert value(text, "kairos_dispatch_lag_seconds_sum") < 5
        assert value(text, "kairos_fenced_batches_total") == 0

        text = httpx.get(f"{up.api}/metrics").text
        assert value(text, "kairos_jobs_submitted_total") == 1
        assert (
            value(text, "kairos_http_request_duration_seconds_count", route="/v1/jobs", method="POST", status="201")
            == 1
        )

        # The executor's one line per outcome, with what its lease told it.
        log = (up.home / "logs" / "executor.log").read_text()
        [outcome] = [entry for entry in map(json.loads, log.splitlines()) if entry["msg"] == "execution outcome"]
        assert (outcome["job_id"], outcome["outcome"], outcome["attempt"]) == (job_id, "succeeded", 1), outcome
        assert isinstance(outcome["lag_ms"], float | int), outcome


@dataclass
class Collector:
    url: str
    exports: list[tuple[str, str, bytes]] = field(default_factory=list)  # (path, content type, body)


@pytest.fixture
def collector() -> Iterator[Collector]:
    """A local OTLP/HTTP endpoint that records what it is sent."""
    state = Collector("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            state.exports.append((self.path, self.headers.get("Content-Type", ""), body))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield state
    server.shutdown()
    server.server_close()


def admin(database_url: str, sql: str) -> None:
    """Run ``sql`` on the server's postgres database (the test's own may refuse connections)."""
    url = embedded.to_sqlalchemy_url(database_url, "postgres").replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql)


def test_a_lone_scheduler_pushes_otlp_and_its_readyz_follows_the_database(
    database_url: str, collector: Collector, tmp_path: Path
) -> None:
    port = free_port()
    probes = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        {
            "KAIROS_DATABASE_URL": database_url,
            "KAIROS_METRICS_PORT": str(port),
            "KAIROS_METRICS_HOST": "127.0.0.1",
            "KAIROS_OTLP_ENDPOINT": collector.url,
            "KAIROS_OTLP_INTERVAL_S": "0.5",
            "KAIROS_HOME": str(tmp_path / "home"),
            "PYTHONUNBUFFERED": "1",
        }
    )
    log_path = tmp_path / "scheduler.log"
    database = urlsplit(database_url).path.lstrip("/")
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "scheduler"], env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:

        def readyz() -> int | None:
            assert proc.poll() is None, log_path.read_text()[-2000:]
            try:
                return httpx.get(f"{probes}/readyz", timeout=5).status_code
            except httpx.HTTPError:
                return None

        wait_for(lambda: readyz() == 200, timeout_s=30, what="/readyz 200")
        # OTLP: protobuf ExportMetricsServiceRequests with our instruments, every half second.
        from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

        def exported_names() -> set[str]:
            names = set()
            for path, content_type, body in list(collector.exports):
                assert (path, content_type) == ("/v1/metrics", "application/x-protobuf")
                request = ExportMetricsServiceRequest.FromString(body)
                names |= {m.name for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
            return names

        wait_for(lambda: "kairos.shards_owned" in exported_names(), timeout_s=15, what="an OTLP export")

        admin(database_url, f"ALTER DATABASE {database} WITH ALLOW_CONNECTIONS false")
        admin(database_url, f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'")
        wait_for(lambda: readyz() == 503, timeout_s=20, what="/readyz 503 while the database refuses us")
        assert "database unreachable" in httpx.get(f"{probes}/readyz").json()["reason"]
        assert httpx.get(f"{probes}/healthz").status_code == 200  # alive all the same
        admin(database_url, f"ALTER DATABASE {database} WITH ALLOW_CONNECTIONS true")
        wait_for(lambda: readyz() == 200, timeout_s=20, what="/readyz 200 again")
    finally:
        admin(database_url, f"ALTER DATABASE {database} WITH ALLOW_CONNECTIONS true")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, log_path.read_text()[-3000:]
