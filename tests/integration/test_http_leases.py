"""HTTP deliveries hold short leases, renewed while the request runs (or waits for a slot), so a
dead executor's deliveries are retried within seconds instead of after the job's whole timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.executor.batching import Outcomes
from app.executor.http_pool import HTTP_QUEUE, HttpPool, HttpPoolConfig
from app.executor.reaper import LeaseReaper, LeaseReaperConfig, ReapResult
from app.store.db import Database, create_engine
from tests import factories as tf
from tests.conftest import free_port
from tests.integration.test_http_isolation import LOCAL, rows, server
from tests.support.polling import poll, wait_for

ROOT = Path(__file__).resolve().parents[2]


async def test_a_request_outlasting_its_lease_keeps_it_and_waiting_deliveries_keep_their_timeout(db: Database) -> None:
    """Leases of 1 s, a target that takes 1.5 s, one request at a time to it, a 3 s timeout: the third
    delivery waits 3 s for its slot. Renewals keep every lease (the reaper running beside finds nothing
    expired), and a waiting delivery's attempt clock restarts, so none is cut short or spends an attempt."""
    t = await tf.tenant(db)
    with server(delay_s=1.5) as target:
        job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=target.url(), timeout_s=3, max_attempts=5)
        ids = await tf.ready_executions(db, job, 3)
        pool = HttpPool(db, Outcomes(db), HttpPoolConfig(per_origin=1, lease_s=1.0, poll_interval_s=0.05), egress=LOCAL)
        reaper = LeaseReaper(db, LeaseReaperConfig(interval_s=0.2))
        stop = asyncio.Event()
        duties = [asyncio.create_task(pool.run(stop)), asyncio.create_task(reaper.run(stop))]
        try:

            async def done() -> bool:
                return all(r.state == "succeeded" for r in await rows(db, ids))

            await poll(done, timeout_s=15, what="every delivery")
        finally:
            stop.set()
            await asyncio.gather(*duties)
            await pool.close()
    assert reaper.total == ReapResult(ready=0, dead=0)
    assert {r.attempt for r in await rows(db, ids)} == {1} and target.received == 3
    assert target.most_in_flight == 1


def _executor(database_url: str, log: Path, allow: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update(
        KAIROS_DATABASE_URL=database_url,
        KAIROS_GRPC_PORT=str(free_port()),
        KAIROS_METRICS_PORT="0",
        KAIROS_HOME=str(log.parent / "home"),
        KAIROS_HTTP_EGRESS_ALLOW=allow,
        KAIROS_HTTP_LEASE_S="2",
        KAIROS_LOG_FORMAT="json",
        KAIROS_DB_POOL_SIZE="3",
        PYTHONUNBUFFERED="1",
    )
    if "KAIROS_SECRET_KEY" in os.environ:  # the key sealing signing secrets (tests/conftest.py sets one)
        env["KAIROS_SECRET_KEY"] = os.environ["KAIROS_SECRET_KEY"]
    with open(log, "wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "executor"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


@pytest.mark.slow
def test_a_killed_executors_delivery_is_retried_within_seconds(database_url: str, tmp_path: Path) -> None:
    """Two `kairos executor` processes; the one whose request is in flight (timeoutSeconds 60) gets SIGKILL.
    Before: its lease lasted the job's timeout, so the other retried after 60 s. Now the 2 s lease lapses
    unrenewed and the other executor retries within a few seconds."""
    import psycopg

    plain_url = database_url.replace("postgresql+psycopg://", "postgresql://")

    async def seed(port: int) -> object:
        db = Database(create_engine(database_url, pool_size=1))
        try:
            t = await tf.tenant(db)
            job = await tf.job(
                db,
                t.tenant_id,
                queue=HTTP_QUEUE,
                target_ref=f"http://127.0.0.1:{port}/hook",
                timeout_s=60,
                max_attempts=3,
            )
            [eid] = await tf.ready_executions(db, job)
            return eid
        finally:
            await db.close()

    with server(open_gate=False) as target:
        allow = f"127.0.0.1:{target.port}"  # a port-scoped entry: that port only
        procs = [_executor(database_url, tmp_path / f"executor-{i}.log", allow) for i in range(2)]
        try:
            for i, p in enumerate(procs):
                wait_for(
                    lambda p=p, i=i: (
                        p.poll() is None and '"executor serving"' in (tmp_path / f"executor-{i}.log").read_text()
                    ),
                    timeout_s=60,
                    what=f"executor {i}",
                )
            eid = asyncio.run(seed(target.port))
            wait_for(lambda: target.received >= 1, timeout_s=15, what="the first request")
            with psycopg.connect(plain_url) as conn:
                owner = conn.execute("SELECT lease_owner FROM executions WHERE execution_id = %s", (eid,)).fetchone()[0]
            pid = int(owner.rsplit(":", 1)[1])
            [victim] = [p for p in procs if p.pid == pid]
            target.gate.set()  # later requests answer at once; the first one's connection dies with its process
            os.killpg(victim.pid, signal.SIGKILL)
            victim.wait(timeout=10)
            killed_at = time.monotonic()
            wait_for(lambda: target.received >= 2, timeout_s=15, what="the retry by the other executor")
            recovery_s = time.monotonic() - killed_at

            def state() -> tuple:
                with psycopg.connect(plain_url) as conn:
                    return conn.execute(
                        "SELECT state, attempt, lease_owner FROM executions WHERE execution_id = %s", (eid,)
                    ).fetchone()

            wait_for(lambda: state()[0] == "succeeded", timeout_s=10, what="the retry to complete")
        finally:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGTERM)
            for p in procs:
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    os.killpg(p.pid, signal.SIGKILL)
    assert state()[1] == 2  # the dead executor's attempt expired (counted), the second one succeeded
    assert recovery_s < 8, f"retried {recovery_s:.1f}s after the kill"
    print(f"retried {recovery_s:.1f}s after SIGKILL (lease 2 s, timeoutSeconds 60)")
