"""SIGKILL of each tier in turn while jobs flow: the API during submits, the scheduler during dispatch,
the executor while workers lease, a worker during its jobs.

`kairos up` runs the tiers (its supervisor restarts the one killed, as a kubelet would); two SDK worker
processes serve the jobs' pool and record every run they start. Each test asserts that nothing
accepted is lost (every job a 2xx answered has a succeeded execution, and no retried submit made a
second job), that no occurrence was dispatched twice, and that every re-run is another attempt of
the same execution carrying the same idempotency key (at-least-once). It reports the work in flight
at the kill, the re-runs (with the outcome the database recorded for the attempts that did not
count) and the recovery time: from the kill to the killed tier's work flowing again.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from tests.chaos.flow import (
    Submitter,
    WorkerProcess,
    child_pids,
    counts,
    db_now,
    demo_tenant,
    due_in,
    job_body,
    outcome,
    query,
    tier_env,
)
from tests.e2e.conftest import kairos_up
from tests.support.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

JOBS = 800


def dispatched_since(url: str, tenant_id: str, since) -> int:
    [(n,)] = query(
        url, "SELECT count(*) FROM executions WHERE tenant_id = %(t)s AND dispatched_at > %(s)s", t=tenant_id, s=since
    )
    return n


def finished_since(url: str, tenant_id: str, since) -> int:
    [(n,)] = query(
        url,
        "SELECT count(*) FROM executions WHERE tenant_id = %(t)s AND state = 'succeeded' AND finished_at > %(s)s",
        t=tenant_id,
        s=since,
    )
    return n


def all_succeeded(url: str, tenant_id: str, n: int) -> bool:
    return counts(url, tenant_id).get("succeeded", 0) >= n


@pytest.mark.parametrize("tier", ["api", "scheduler", "executor", "worker"])
def test_sigkill_of_a_tier_under_load_loses_nothing(
    tmp_path: Path, database_url: str, record_property, tier: str
) -> None:
    handler_s = 0.3 if tier == "worker" else 0.05  # a worker killed "during a job" must have jobs running
    with kairos_up(tmp_path, KAIROS_DATABASE_URL=database_url, **tier_env(KAIROS_DISPATCH_AHEAD_S="0")) as up:
        url, tenant_id = database_url, demo_tenant(database_url)
        workers = [
            WorkerProcess.start(
                tmp_path, f"w{i}", up.grpc_addr, up.key, handler_s=handler_s, concurrency=32, lease_s=3.0
            )
            for i in range(2)
        ]
        submitter = Submitter(up.api, up.key)
        report: dict[str, object] = {"fault": f"SIGKILL {tier}"}
        try:
            if tier == "api":
                # Submits one by one, eight at a time, paced so they last several seconds: the kill lands
                # among them.
                bodies = [job_body(i, delay_s=1.0) for i in range(JOBS)]
                done = threading.Event()
                failure: list[BaseException] = []

                def submit() -> None:
                    try:
                        asyncio.run(submitter.many(bodies, concurrency=8, deadline_s=90, pace_s=0.05))
                    except BaseException as exc:  # noqa: BLE001 - reported by the main thread
                        failure.append(exc)
                    finally:
                        done.set()

                thread = threading.Thread(target=submit, daemon=True)
                thread.start()
                wait_for(
                    lambda: len(submitter.accepted) >= JOBS // 3 or done.is_set(),
                    timeout_s=60,
                    what="a third of the submits",
                )
                report["in_flight"] = {"submits_accepted_before_kill": len(submitter.accepted), "submits_concurrent": 8}
                victim, killed = child_pids(up.text())["api"], time.monotonic()
                _kill(victim)

                def accepted_again() -> bool:
                    restarted = child_pids(up.text())["api"] != victim
                    return done.is_set() or (restarted and any(s > killed for s, _ in submitter.accepted_at))

                wait_for(accepted_again, timeout_s=60, what="a submit to be accepted by the restarted API")
                # The first acceptance of a request sent after the kill: only the restarted API can give it.
                report["recovery_s"] = round(min(a for s, a in submitter.accepted_at if s > killed) - killed, 2)
                thread.join(timeout=90)
                assert not failure, failure
                assert done.is_set()
                # Submits that got no answer (or a 5xx) across the kill and were sent again with their key.
                report["submits_retried"] = submitter.transport_errors + submitter.refused
            else:
                if tier == "scheduler":  # due over 10 s, dispatched at the due time: kill during dispatch
                    first = due_in(5)
                    due = [first + timedelta(seconds=10.0 * i / JOBS) for i in range(JOBS)]
                else:  # due within 2 s, all dispatched at once: the kill lands among leases and runs
                    first = due_in(4)
                    due = [first + timedelta(seconds=2.0 * i / JOBS) for i in range(JOBS)]
                asyncio.run(submitter.batches([job_body(i, run_at=at) for i, at in enumerate(due)]))
                wait_for(
                    lambda: (
                        sum(counts(url, tenant_id).values()) >= JOBS // 4
                        if tier == "scheduler"
                        else counts(url, tenant_id).get("succeeded", 0) >= JOBS // 6
                    ),
                    timeout_s=60,
                    what="the flow to be under way",
                )
                report["in_flight"] = counts(url, tenant_id)
                killed_db, killed = db_now(url), time.monotonic()
                if tier == "worker":
                    victim = workers[0]
                    started = {r["e"] for r in victim.runs()}
                    victim.proc.send_signal(signal.SIGKILL)
                    victim.proc.wait(timeout=10)
                    running = [
                        e
                        for (e,) in query(
                            url,
                            "SELECT execution_id::text FROM executions WHERE "
                            "execution_id = ANY(%(ids)s::uuid[]) AND state = 'leased'",
                            ids=sorted(started),
                        )
                    ]
                    report["in_flight"] = {**report["in_flight"], "running_on_the_killed_worker": len(running)}
                    assert running, "the killed worker had no job running"

                    def its_jobs_done() -> bool:
                        [(left,)] = query(
                            url,
                            "SELECT count(*) FROM executions WHERE execution_id = "
                            "ANY(%(ids)s::uuid[]) AND state <> 'succeeded'",
                            ids=running,
                        )
                        return left == 0

                    wait_for(its_jobs_done, timeout_s=60, what="the killed worker's jobs to run elsewhere")
                    report["recovery_s"] = round(time.monotonic() - killed, 2)
                else:
                    victim_pid = child_pids(up.text())[tier]
                    _kill(victim_pid)
                    flowing = dispatched_since if tier == "scheduler" else finished_since
                    wait_for(
                        lambda: child_pids(up.text())[tier] != victim_pid,
                        timeout_s=60,
                        what=f"kairos up to restart the {tier}",
                    )
                    # Only the new process can have dispatched (completed) anything after the kill.
                    wait_for(
                        lambda: flowing(url, tenant_id, killed_db) > 0,
                        timeout_s=60,
                        what=f"work to flow through the new {tier}",
                    )
                    report["recovery_s"] = round(time.monotonic() - killed, 2)
            wait_for(
                lambda: all_succeeded(url, tenant_id, len(submitter.accepted)),
                timeout_s=90,
                interval_s=0.5,
                what="every accepted job to succeed",
            )
            result = outcome(url, submitter.accepted.values(), workers, tenant_id)
        finally:
            for w in workers:
                w.stop()
    assert result.jobs_in_db == result.accepted, "a retried submit made a second job (or an accepted one is gone)"
    assert not result.lost, f"{len(result.lost)} accepted jobs never succeeded"
    assert not result.dispatched_twice, f"{len(result.dispatched_twice)} occurrences dispatched twice"
    assert not result.keys_differ, "a re-run carried another idempotency key"
    assert set(result.attempt_outcomes) <= {"expired", "discarded", "failed"}, result.attempt_outcomes
    if tier in ("api", "scheduler"):
        assert result.extra_attempts == 0, "killing the API or the scheduler re-ran a job"
    report.update(result.report())
    record_property("fault_report", json.dumps(report))
    print("FAULT", json.dumps(report))


def _kill(pid: int) -> None:
    import os

    os.kill(pid, signal.SIGKILL)
