"""The database crashes and restarts while thousands of jobs flow through every tier.

`kairos up` runs the API, the scheduler and the executor against a PostgreSQL server of this module's
own (so killing it touches no other test); two SDK worker processes serve the jobs' pool. Jobs are
submitted through the REST API, then the whole server is SIGKILLed (postmaster and backends: a
crash, recovered from its WAL on restart) while occurrences are being dispatched, or while workers
are completing them, and started again after a short outage. Nobody restarts a tier.

Each test asserts: every accepted job ran and succeeded (lost: 0); no occurrence was dispatched twice
(one execution per one-off job); every tier process is the one that was running before the crash
(each reconnected by itself); re-runs are attempts of the same execution with the same idempotency
key (at-least-once: an outcome that could not be reported while the database was down). It reports
the work in flight at the crash, the re-runs and the recovery time (database accepting connections
again -> every /readyz 200 and the first execution completed after it).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest

from app.store import embedded
from tests.chaos.flow import (
    Submitter,
    WorkerProcess,
    child_pids,
    counts,
    db_now,
    demo_tenant,
    due_in,
    job_body,
    kill_tree,
    outcome,
    readiness_urls,
    ready,
    succeeded_since,
    tier_env,
)
from tests.e2e.conftest import kairos_up
from tests.support.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# 3,000 in make test (the suite's time budget); KAIROS_CHAOS_JOBS=10000 runs the size.
JOBS = int(os.environ.get("KAIROS_CHAOS_JOBS", "3000"))
# The injected fault: how long the database stays down before it is started again.
OUTAGE_S = 2.0


@dataclass
class PrivateServer:
    """An embedded PostgreSQL this module may crash and restart."""

    pgdata: Path
    url: str  # the postgres database (admin)

    def new_database(self) -> str:
        name = f"c_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return embedded.to_sqlalchemy_url(self.url, name)

    def crash(self) -> int:
        """SIGKILL the postmaster and every backend at once; how many processes died."""
        pid = embedded.postmaster(self.pgdata)
        assert pid is not None, "the server is not running"
        killed = kill_tree(pid)
        wait_for(lambda: embedded.postmaster(self.pgdata) is None, timeout_s=10, what="the postmaster to die")
        return killed

    def restart(self) -> None:
        embedded.restart(self.pgdata)


@pytest.fixture(scope="module")
def server() -> Iterator[PrivateServer]:
    import pgserver

    pgdata = Path(f"/tmp/kairos-crash-{os.getpid()}-{uuid.uuid4().hex[:6]}")  # short: a Unix socket lives here
    url = embedded.start(pgdata, cleanup="delete")
    yield PrivateServer(pgdata, url)
    if embedded.postmaster(pgdata) is None:
        embedded.restart(pgdata)
    pgserver.get_server(str(pgdata)).cleanup()
    shutil.rmtree(pgdata, ignore_errors=True)


def crash_and_measure(server: PrivateServer, url: str, up, tenant_id: str) -> dict[str, float]:
    """Crash the server, start it again after OUTAGE_S, and time the way back."""
    killed = server.crash()
    crashed = time.monotonic()
    wait_for(
        lambda: not all(ready(u) for u in readiness_urls(up)), timeout_s=15, what="a tier's /readyz to notice the crash"
    )
    time.sleep(OUTAGE_S)  # the outage itself (the injected fault), not a wait for anything
    server.restart()
    back = time.monotonic()
    back_db = db_now(url)
    wait_for(lambda: all(ready(u) for u in readiness_urls(up)), timeout_s=30, what="every /readyz to be 200 again")
    ready_s = time.monotonic() - back
    wait_for(
        lambda: succeeded_since(url, tenant_id, back_db) > 0,
        timeout_s=30,
        what="an execution to complete after the restart",
    )
    flowing_s = time.monotonic() - back
    return {
        "processes_killed": killed,
        "down_s": round(back - crashed, 2),
        "ready_after_s": round(ready_s, 2),
        "flowing_after_s": round(flowing_s, 2),
    }


def run_fault(
    tmp_path: Path,
    server: PrivateServer,
    record_property,
    *,
    name: str,
    due: list,
    handler_s: float,
    concurrency: int,
    crash_when,
) -> dict:
    url = server.new_database()
    with kairos_up(tmp_path, KAIROS_DATABASE_URL=url, **tier_env(KAIROS_DISPATCH_AHEAD_S="0")) as up:
        tenant_id = demo_tenant(url)
        workers = [
            WorkerProcess.start(tmp_path, f"w{i}", up.grpc_addr, up.key, handler_s=handler_s, concurrency=concurrency)
            for i in range(2)
        ]
        try:
            submitter = Submitter(up.api, up.key)
            asyncio.run(submitter.batches([job_body(i, run_at=at) for i, at in enumerate(due)]))
            tiers = child_pids(up.text())
            wait_for(lambda: crash_when(counts(url, tenant_id)), timeout_s=60, what="the moment to crash")
            at_crash = counts(url, tenant_id)
            recovery = crash_and_measure(server, url, up, tenant_id)

            def all_succeeded() -> bool:
                return counts(url, tenant_id).get("succeeded", 0) >= len(submitter.accepted)

            wait_for(all_succeeded, timeout_s=90, interval_s=0.5, what="every accepted job to succeed")
            result = outcome(url, submitter.accepted.values(), workers, tenant_id)
            assert child_pids(up.text()) == tiers, "a tier was restarted: it should have reconnected by itself"
            assert all(w.proc.poll() is None for w in workers), "a worker died"
        finally:
            for w in workers:
                w.stop()
    assert result.jobs_in_db == result.accepted == len(due)
    assert not result.lost, f"{len(result.lost)} accepted jobs never succeeded"
    assert not result.dispatched_twice, f"{len(result.dispatched_twice)} occurrences dispatched twice"
    assert not result.keys_differ, "a re-run carried another idempotency key"
    # Every re-run is an attempt the database saw end without success: an expired lease whose outcome
    # could not be reported, or one discarded when the late report came.
    assert set(result.attempt_outcomes) <= {"expired", "discarded", "failed"}, result.attempt_outcomes
    report = {
        "fault": name,
        "jobs": len(due),
        "in_flight_at_crash": {k: v for k, v in at_crash.items() if k in ("ready", "leased")},
        "succeeded_before_crash": at_crash.get("succeeded", 0),
        **recovery,
        **result.report(),
    }
    record_property("fault_report", json.dumps(report))
    print("FAULT", json.dumps(report))
    return report


def test_database_crash_mid_dispatch_loses_nothing_and_every_tier_reconnects(
    tmp_path: Path, server: PrivateServer, record_property
) -> None:
    # Due over 12 s and dispatched at their due time: the crash lands while the scheduler is writing
    # executions (a quarter of them done).
    first = due_in(6)
    due = [first + timedelta(seconds=12.0 * i / JOBS) for i in range(JOBS)]
    report = run_fault(
        tmp_path,
        server,
        record_property,
        name="database crash mid-dispatch",
        due=due,
        handler_s=0.02,
        concurrency=64,
        crash_when=lambda c: sum(c.values()) >= JOBS // 4,
    )
    assert report["in_flight_at_crash"] or report["succeeded_before_crash"] < JOBS


def test_database_crash_mid_complete_loses_nothing_and_reruns_only_unreported_outcomes(
    tmp_path: Path, server: PrivateServer, record_property
) -> None:
    # All due at once and dispatched within a second; workers take 0.2 s a job, 64 at a time, so
    # completions flow for some ten seconds and the crash lands among them (a quarter completed).
    at = due_in(6)
    report = run_fault(
        tmp_path,
        server,
        record_property,
        name="database crash mid-complete",
        due=[at] * JOBS,
        handler_s=0.2,
        concurrency=32,
        crash_when=lambda c: c.get("succeeded", 0) >= JOBS // 4,
    )
    assert report["in_flight_at_crash"].get("leased", 0) > 0  # completions were really in flight
