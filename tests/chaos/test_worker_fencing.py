"""Real processes: an executor, workers paused with SIGSTOP, workers that crash, SIGTERM drains.

Each test runs `kairos executor` as a subprocess on its own database and drives workers as
subprocesses (the `kairos worker` command, or a raw gRPC client script).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.store.db import Database, create_engine
from tests import factories as tf
from tests.conftest import free_port
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Executor:
    addr: str
    proc: subprocess.Popen
    log: Path


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KAIROS_")}
    env.update({"KAIROS_LOG_FORMAT": "json", "PYTHONUNBUFFERED": "1", **extra})
    return env


@pytest.fixture
def executor(database_url: str, tmp_path: Path) -> Iterator[Executor]:
    port = free_port()
    log = tmp_path / "executor.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "executor"],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(
                KAIROS_DATABASE_URL=database_url,
                KAIROS_GRPC_PORT=str(port),
                KAIROS_SECRET_KEY=os.environ["KAIROS_SECRET_KEY"],
                KAIROS_HOME=str(tmp_path / "home"),
                KAIROS_HTTP_EGRESS_ALLOW="127.0.0.1",
            ),
        )

    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"executor exited: {log.read_text()[-3000:]}")
        return '"executor serving"' in log.read_text()

    wait_for(listening, timeout_s=30, what="executor to serve")
    yield Executor(f"127.0.0.1:{port}", proc, log)
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=15) == 0, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()


def query(database_url: str, sql: str, **params) -> list:
    """Read the database directly (assertions only)."""
    import psycopg
    from psycopg.rows import tuple_row

    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://"), row_factory=tuple_row) as c:
        return c.execute(sql.replace(":e", "%(e)s"), params).fetchall()


def setup(database_url: str, work):
    """Run ``work(db)`` (factories) on a short-lived connection pool."""

    async def main():
        db = Database(create_engine(database_url, pool_size=1))
        try:
            return await work(db)
        finally:
            await db.close()

    return asyncio.run(main())


async def _one_ready(db: Database, pool: str, max_attempts: int):
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=tf.tenant_queue(t.tenant_id, pool), max_attempts=max_attempts)
    [eid] = await tf.ready_executions(db, job)
    return t, eid


def command_worker(
    executor: Executor, key: str, pool: str, command: list[str], log: Path, *extra: str
) -> subprocess.Popen:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker", "--pool", pool, *extra, "--", *command],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=_env(KAIROS_GRPC_ADDR=executor.addr, KAIROS_API_KEY=key),
        )


# A raw client: lease one execution, report it, wait for a go-file, then complete it.
SLOW_WORKER = r"""
import asyncio, json, os, sys, time
from kairos_sdk import WorkerClient

async def main(addr, key, pool, go):
    async with WorkerClient(addr, key) as client:
        [e] = await client.lease(pool, "slow-worker", 1, lease_seconds=2, wait_seconds=10)
        print(json.dumps({"leased": e.execution_id, "attempt": e.attempt}), flush=True)
        while not os.path.exists(go):
            time.sleep(0.02)  # blocks the loop on purpose: this worker is "stuck"
        answer = await client.complete(e.execution_id, e.attempt, {"by": "slow"})
        print(json.dumps({"complete": answer.outcome, "message": answer.message}), flush=True)

asyncio.run(main(*sys.argv[1:]))
"""


def test_paused_worker_gets_lease_lost_and_its_result_is_discarded(
    database_url: str, executor: Executor, tmp_path: Path
) -> None:
    t, eid = setup(database_url, lambda db: _one_ready(db, "p", 5))
    go, out = tmp_path / "go", tmp_path / "slow.out"
    with open(out, "wb") as sink:
        slow = subprocess.Popen(
            [sys.executable, "-c", SLOW_WORKER, executor.addr, t.key, "p", str(go)],
            cwd=ROOT,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=_env(),
        )
    try:
        wait_for(lambda: '"leased"' in out.read_text(), timeout_s=20, what="slow worker to lease")
        assert json.loads(out.read_text().splitlines()[0]) == {"leased": str(eid), "attempt": 1}
        os.kill(slow.pid, signal.SIGSTOP)
        # Its 2 s lease expires; the executor's reaper returns the execution to ready.
        wait_for(
            lambda: query(database_url, "SELECT state FROM executions WHERE execution_id = :e", e=eid) == [("ready",)],
            timeout_s=20,
            what="the lease to be reaped",
        )
        fast_log = tmp_path / "fast.log"
        fast = command_worker(executor, t.key, "p", ["sh", "-c", 'cat >/dev/null; echo \'{"by": "fast"}\''], fast_log)
        try:
            wait_for(
                lambda: (
                    query(database_url, "SELECT state, attempt FROM executions WHERE execution_id = :e", e=eid)
                    == [("succeeded", 2)]
                ),
                timeout_s=20,
                what="attempt 2 to succeed",
            )
        finally:
            fast.send_signal(signal.SIGTERM)
            assert fast.wait(timeout=20) == 0, fast_log.read_text()[-2000:]
        go.touch()
        os.kill(slow.pid, signal.SIGCONT)
        assert slow.wait(timeout=20) == 0, out.read_text()
    finally:
        if slow.poll() is None:
            os.kill(slow.pid, signal.SIGCONT)
            slow.kill()
    answer = json.loads(out.read_text().splitlines()[-1])
    assert answer["complete"] == "lease_lost"
    [(state, result)] = query(database_url, "SELECT state, result FROM executions WHERE execution_id = :e", e=eid)
    assert (state, result) == ("succeeded", {"by": "fast"})
    history = query(
        database_url, "SELECT attempt, outcome, result FROM attempts WHERE execution_id = :e ORDER BY attempt", e=eid
    )
    assert history == [(1, "discarded", {"by": "slow"}), (2, "succeeded", {"by": "fast"})]


def test_poison_job_that_kills_its_worker_ends_dead_after_max_attempts(
    database_url: str, executor: Executor, tmp_path: Path
) -> None:
    t, eid = setup(database_url, lambda db: _one_ready(db, "poison", 3))
    log = tmp_path / "poison.log"

    def state() -> str:
        return query(database_url, "SELECT state FROM executions WHERE execution_id = :e", e=eid)[0][0]

    for attempt in (1, 2, 3):
        assert state() == "ready"
        # The job kills the worker running it (SIGKILL to its parent) every time.
        worker = command_worker(
            executor, t.key, "poison", ["sh", "-c", "kill -9 $PPID; sleep 5"], log, "--lease-seconds", "1"
        )
        assert worker.wait(timeout=30) == -signal.SIGKILL
        wait_for(lambda: state() != "leased", timeout_s=30, what=f"lease of attempt {attempt} to be reaped")
    assert state() == "dead"
    history = query(
        database_url, "SELECT attempt, outcome FROM attempts WHERE execution_id = :e ORDER BY attempt", e=eid
    )
    assert history == [(1, "expired"), (2, "expired"), (3, "expired")]
    [(error,)] = query(database_url, "SELECT error FROM executions WHERE execution_id = :e", e=eid)
    assert "lease expired" in error


def test_sigterm_lets_the_running_execution_finish(database_url: str, executor: Executor, tmp_path: Path) -> None:
    t, eid = setup(database_url, lambda db: _one_ready(db, "p", 5))
    started, log = tmp_path / "started", tmp_path / "worker.log"
    # The command signals that it runs, then needs another second to finish.
    worker = command_worker(
        executor, t.key, "p", ["sh", "-c", f"touch {started}; sleep 1; echo '{{\"done\": 1}}'"], log
    )
    try:
        wait_for(started.exists, timeout_s=20, what="the command to start")
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0, log.read_text()[-2000:]
    finally:
        if worker.poll() is None:
            worker.kill()
    assert query(database_url, "SELECT state, result FROM executions WHERE execution_id = :e", e=eid) == [
        ("succeeded", {"done": 1})
    ]
