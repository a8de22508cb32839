"""Work flowing through every tier for the chaos tests: REST submit -> scheduler -> executor -> SDK worker.

``kairos up`` (tests.e2e.conftest) runs the tiers; ``WorkerProcess`` runs an SDK ``Worker`` whose
handler writes one JSON line per run it starts (execution, attempt, idempotency key), flushed, so a
run is on record even when its worker is SIGKILLed a moment later; ``Submitter`` posts jobs through
the REST API with an ``Idempotency-Key`` each, retrying until it is answered, so "accepted" means a
2xx came back; ``Ledger`` reads the outcome back from the database (on its own clock) and from the
workers' records: what was lost, what ran twice and why, and when work flowed again after a fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import psutil
import psycopg

ROOT = Path(__file__).resolve().parents[2]
POOL = "chaos"

# One SDK worker process: every run it starts is a line in its record before the handler sleeps.
WORKER = r"""
import asyncio, json, os, sys
from kairos_sdk import Worker

addr, key, record, handler_s, concurrency, lease_s = sys.argv[1:7]
out = open(record, "a", buffering=1)

async def handler(e):
    out.write(json.dumps({"e": e.execution_id, "j": e.job_id, "a": e.attempt, "k": e.idempotency_key,
                          "w": os.getpid()}) + "\n")
    await asyncio.sleep(float(handler_s))
    return {"ok": True}

Worker("chaos", handler, addr=addr, api_key=key, concurrency=int(concurrency), lease_seconds=float(lease_s),
       wait_seconds=1.0, idle_notice_s=None).run_forever()
"""


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update({"PYTHONUNBUFFERED": "1", **extra})
    return env


@dataclass
class WorkerProcess:
    proc: subprocess.Popen
    record: Path
    log: Path

    @classmethod
    def start(
        cls,
        tmp: Path,
        name: str,
        addr: str,
        key: str,
        *,
        handler_s: float = 0.02,
        concurrency: int = 64,
        lease_s: float = 4.0,
    ) -> WorkerProcess:
        record, log = tmp / f"{name}.runs", tmp / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-c", WORKER, addr, key, str(record), str(handler_s), str(concurrency), str(lease_s)],
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=clean_env(KAIROS_LOG_FORMAT="json"),
            )
        return cls(proc, record, log)

    def runs(self) -> list[dict]:
        if not self.record.exists():
            return []
        return [json.loads(line) for line in self.record.read_text().splitlines() if line.endswith("}")]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def job_body(i: int, *, delay_s: float = 0.0, run_at: datetime | None = None) -> dict:
    schedule = {"runAt": run_at.isoformat()} if run_at else {"delaySeconds": delay_s}
    # Generous attempts and a short backoff: a lease lost to a fault is retried within seconds.
    return {
        "name": f"chaos-{i}",
        "target": {"type": "queue", "ref": POOL},
        "payload": {"i": i},
        "schedule": schedule,
        "retry": {"maxAttempts": 20, "backoffSeconds": 0.5, "maxBackoffSeconds": 2},
    }


@dataclass
class Submitter:
    """Submits through the REST API and keeps what was accepted (a 2xx answer), retrying each job with its
    own Idempotency-Key until it is answered or ``deadline_s`` passes."""

    api: str
    key: str
    accepted: dict[str, str] = field(default_factory=dict)  # idempotency key -> job id
    refused: int = 0  # answers that were not 2xx (retried)
    transport_errors: int = 0  # no answer at all (retried)
    # (sent, answered): monotonic times of the request that was accepted, for each job
    accepted_at: list[tuple[float, float]] = field(default_factory=list)

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    async def one(self, client: httpx.AsyncClient, body: dict, deadline: float) -> None:
        key = str(uuid.uuid4())
        delay = 0.05
        while time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                answer = await client.post(
                    f"{self.api}/v1/jobs", json=body, headers={**self.headers, "Idempotency-Key": key}
                )
            except httpx.HTTPError:
                self.transport_errors += 1
            else:
                if answer.status_code in (200, 201):
                    self.accepted[key] = answer.json()["jobId"]
                    self.accepted_at.append((sent, time.monotonic()))
                    return
                self.refused += 1
            await asyncio.sleep(delay)
            delay = min(1.0, delay * 2)
        raise AssertionError(
            f"a submit was not answered within the deadline ({self.refused} refusals, "
            f"{self.transport_errors} transport errors)"
        )

    async def many(
        self, bodies: Iterable[dict], *, concurrency: int = 8, deadline_s: float = 60.0, pace_s: float = 0.0
    ) -> None:
        queue = list(bodies)
        deadline = time.monotonic() + deadline_s
        async with httpx.AsyncClient(timeout=10.0) as client:

            async def lane(k: int) -> None:
                for body in queue[k::concurrency]:
                    await self.one(client, body, deadline)
                    if pace_s:
                        await asyncio.sleep(pace_s)

            await asyncio.gather(*(lane(k) for k in range(concurrency)))

    async def batches(self, bodies: list[dict], *, size: int = 500) -> None:
        """Bulk: POST /v1/jobs:batch, each item with its own idempotencyKey."""
        async with httpx.AsyncClient(timeout=60.0) as client:
            for start in range(0, len(bodies), size):
                items = [{**b, "idempotencyKey": str(uuid.uuid4())} for b in bodies[start : start + size]]
                answer = await client.post(f"{self.api}/v1/jobs:batch", json={"jobs": items}, headers=self.headers)
                assert answer.status_code == 200, answer.text[:500]
                for item, result in zip(items, answer.json()["results"], strict=True):
                    assert "jobId" in result, result
                    self.accepted[item["idempotencyKey"]] = result["jobId"]


def sql_url(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def query(url: str, sql: str, **params: object) -> list[tuple]:
    with psycopg.connect(sql_url(url), connect_timeout=5) as conn:
        return conn.execute(sql, params).fetchall()


@dataclass
class Outcome:
    """What became of the accepted jobs: every figure a fault report needs."""

    accepted: int
    jobs_in_db: int
    lost: list[str]  # accepted jobs without a succeeded execution
    dispatched_twice: list[str]  # jobs with more than one execution (one-off jobs: never allowed)
    extra_attempts: int  # attempts beyond the first over all executions (at-least-once re-runs)
    attempt_outcomes: Counter  # outcome of every attempt that was not the last
    runs_twice: dict[str, list[dict]]  # executions a worker started more than once -> their runs
    keys_differ: list[str]  # of those, executions whose runs carried different idempotency keys

    def report(self) -> dict[str, object]:
        return {
            "accepted": self.accepted,
            "lost": len(self.lost),
            "dispatched_twice": len(self.dispatched_twice),
            "extra_attempts": self.extra_attempts,
            "ran_twice": len(self.runs_twice),
            "earlier_attempts": dict(self.attempt_outcomes),
        }


def outcome(url: str, accepted: Iterable[str], workers: Iterable[WorkerProcess], tenant_id: str) -> Outcome:
    ids = sorted(set(accepted))
    [(in_db,)] = query(url, "SELECT count(*) FROM jobs WHERE tenant_id = %(t)s AND name LIKE 'chaos-%%'", t=tenant_id)
    executions = query(
        url,
        "SELECT job_id::text, count(*), bool_or(state = 'succeeded'), max(attempt) - 1 "
        "FROM executions WHERE job_id = ANY(%(ids)s::uuid[]) GROUP BY job_id",
        ids=ids,
    )
    by_job = {j: (n, ok, extra) for j, n, ok, extra in executions}
    lost = [j for j in ids if not by_job.get(j, (0, False, 0))[1]]
    twice = [j for j, (n, _, _) in by_job.items() if n > 1]
    earlier = Counter(
        o
        for (o,) in query(
            url,
            "SELECT a.outcome FROM attempts a JOIN executions e USING (execution_id) "
            "WHERE e.job_id = ANY(%(ids)s::uuid[]) AND a.attempt < e.attempt",
            ids=ids,
        )
    )
    runs: dict[str, list[dict]] = {}
    for w in workers:
        for run in w.runs():
            runs.setdefault(run["e"], []).append(run)
    again = {e: r for e, r in runs.items() if len(r) > 1}
    differ = [e for e, r in again.items() if len({x["k"] for x in r}) != 1]
    return Outcome(len(ids), in_db, lost, twice, sum(extra for _, _, extra in by_job.values()), earlier, again, differ)


def succeeded_since(url: str, tenant_id: str, since: datetime) -> int:
    [(n,)] = query(
        url,
        "SELECT count(*) FROM executions WHERE tenant_id = %(t)s AND state = 'succeeded' AND finished_at > %(since)s",
        t=tenant_id,
        since=since,
    )
    return n


def counts(url: str, tenant_id: str) -> dict[str, int]:
    return dict(
        query(url, "SELECT state, count(*) FROM executions WHERE tenant_id = %(t)s GROUP BY state", t=tenant_id)
    )


def db_now(url: str) -> datetime:
    [(now,)] = query(url, "SELECT now()")
    return now


def ready(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def child_pids(output: str) -> dict[str, int]:
    """The latest pid `kairos up` logged for each tier ("child started tier=api pid=123")."""
    return {tier: int(pid) for tier, pid in re.findall(r"child started tier=(\w+) pid=(\d+)", output)}


def kill_tree(pid: int) -> int:
    """SIGKILL a process and every descendant at once (a crash of the whole thing); how many died."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.send_signal(signal.SIGKILL)
    return len(procs)


def due_in(seconds: float) -> datetime:
    return datetime.now(timezone.utc) + timedelta(seconds=seconds)


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports (the metrics ports of `kairos up`'s tiers)."""
    import socket

    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            for port in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise AssertionError("no run of free ports")


def tier_env(**extra: str) -> dict[str, str]:
    """Settings for `kairos up` under chaos: short leases so takeovers and expiries take seconds (and the
    key sealing signing secrets, which an external database requires)."""
    from cryptography.fernet import Fernet

    return {
        "KAIROS_SECRET_KEY": Fernet.generate_key().decode(),
        "KAIROS_LEASE_TTL_S": "3",
        "KAIROS_API_WORKERS": "1",
        "KAIROS_DB_STATEMENT_TIMEOUT_S": "5",
        "KAIROS_LOG_FORMAT": "json",
        "KAIROS_METRICS_PORT": str(free_ports(3)),
        "KAIROS_DB_POOL_SIZE": "8",
        **extra,
    }


def metrics_port(up_env: dict[str, str], tier: str) -> int:
    base = int(up_env["KAIROS_METRICS_PORT"])
    return {"scheduler": base, "executor": base + 1, "up": base + 2}[tier]


def readiness_urls(up) -> list[str]:
    """Every tier's /readyz under `kairos up` (the API's port, the scheduler's and executor's metrics ports)."""
    probes = [f"http://127.0.0.1:{metrics_port(up.env, t)}/readyz" for t in ("scheduler", "executor")]
    return [f"{up.api}/readyz", *probes]


def demo_tenant(url: str) -> str:
    [(tenant_id,)] = query(url, "SELECT tenant_id::text FROM tenants WHERE name = 'demo'")
    return tenant_id
