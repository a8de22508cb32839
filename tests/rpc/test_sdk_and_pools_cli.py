"""The SDK Worker against a real server (heartbeats, LEASE_LOST cancels the handler) and `kairos pools`."""

from __future__ import annotations

import asyncio
import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import grpc
import pytest

from app.executor.batching import Outcomes
from app.rpc.servicer import ServicerConfig
from app.store.db import Database
from kairos_sdk import NonRetryable, Worker, WorkerClient
from tests import factories as tf
from tests.support.cli import child
from tests.support.polling import poll

ROOT = Path(__file__).resolve().parents[2]


async def test_worker_completes_fails_and_dead_letters(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "jobs")
    ok = await tf.job(db, t.tenant_id, queue=queue, payload={"do": "ok"})
    bad = await tf.job(db, t.tenant_id, queue=queue, payload={"do": "bad"})
    flaky = await tf.job(db, t.tenant_id, queue=queue, payload={"do": "flaky"}, backoff_s=60, max_backoff_s=60)
    [e_ok], [e_bad], [e_flaky] = [await tf.ready_executions(db, j) for j in (ok, bad, flaky)]

    async def handler(execution):
        if execution.payload["do"] == "bad":
            raise NonRetryable("cannot ever work")
        if execution.payload["do"] == "flaky":
            raise RuntimeError("try again")
        return {"handled": execution.execution_id}

    stop = asyncio.Event()
    worker = Worker("jobs", handler, addr=addr, api_key=t.key, wait_seconds=0.5)
    run = asyncio.create_task(worker.run(stop))

    async def states():
        rows = [await db.transaction(lambda c, e=e: c.executions.get(t.tenant_id, e)) for e in (e_ok, e_bad, e_flaky)]
        return [r.state for r in rows] == ["succeeded", "dead", "ready"] and rows

    rows = await poll(states, timeout_s=15, interval_s=0.05, what="all three outcomes")
    stop.set()
    await asyncio.wait_for(run, 10)
    assert rows[0].result == {"handled": str(e_ok)}
    assert rows[1].error == "cannot ever work"
    assert rows[2].error == "RuntimeError: try again" and rows[2].ready_at > datetime.now(timezone.utc)


async def test_lease_lost_on_heartbeat_cancels_the_handler(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "jobs")
    job = await tf.job(db, t.tenant_id, queue=queue)
    [eid] = await tf.ready_executions(db, job)
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(_execution):
        started.set()
        try:
            await asyncio.Event().wait()  # runs until cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise

    stop = asyncio.Event()
    worker = Worker("jobs", handler, addr=addr, api_key=t.key, lease_seconds=1, wait_seconds=0.5)
    run = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(started.wait(), 10)
    # Another worker takes the execution over (as after an expiry): attempt 2 is current now.
    later = datetime.now(timezone.utc) + timedelta(seconds=5)
    await db.transaction(lambda c: c.executions.reap_expired(10, now=later))
    await db.transaction(lambda c: c.executions.lease(queue, "other", 1, 60, now=later))
    await asyncio.wait_for(cancelled.wait(), 10)  # the next heartbeat answered LEASE_LOST
    stop.set()
    await asyncio.wait_for(run, 10)
    assert worker.stats["lease_lost"] == 1 and worker.stats["completed"] == 0 and worker.stats["failed"] == 0
    history = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, eid))
    assert [(a.attempt, a.outcome) for a in history] == [(1, "expired"), (2, "running")]


async def test_one_lease_answer_beats_and_times_out_each_execution_on_its_own(db: Database, addr: str) -> None:
    """Three executions leased by one call share its timers: one returns at once, one outlives its
    1 s timeout (failed as retryable, cancelled in its handler), one keeps running and is cancelled
    by the heartbeat that answers LEASE_LOST after the other two have left the group."""
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "jobs")
    [quick] = await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue, payload={"do": "quick"}))
    slow_job = await tf.job(
        db, t.tenant_id, queue=queue, payload={"do": "slow"}, timeout_s=1, backoff_s=60, max_backoff_s=60
    )
    [slow] = await tf.ready_executions(db, slow_job)
    [held] = await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue, payload={"do": "hold"}))
    cancelled = {"slow": asyncio.Event(), "hold": asyncio.Event()}
    holding = asyncio.Event()

    async def handler(execution):
        do = execution.payload["do"]
        if do == "quick":
            return {"quick": True}
        holding.set() if do == "hold" else None
        try:
            await asyncio.Event().wait()  # runs until cancelled
        except asyncio.CancelledError:
            cancelled[do].set()
            raise

    stop = asyncio.Event()
    worker = Worker(
        "jobs", handler, addr=addr, api_key=t.key, concurrency=3, batch=3, lease_seconds=2, wait_seconds=0.5, prefetch=0
    )
    run = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(cancelled["slow"].wait(), 10)

    async def slow_failed():
        row = await db.transaction(lambda c: c.executions.get(t.tenant_id, slow))
        return row.state == "ready" and row

    row = await poll(slow_failed, timeout_s=10, interval_s=0.05, what="the timed-out execution to be failed")
    assert row.error == "timed out after 1s" and row.attempt == 1
    assert (await db.transaction(lambda c: c.executions.get(t.tenant_id, quick))).state == "succeeded"
    # The held one is still beaten after the other two left the group: its lease is extended ...
    await asyncio.wait_for(holding.wait(), 1)

    async def extended():
        row = await db.transaction(lambda c: c.executions.get(t.tenant_id, held))
        return row.lease_until - row.started_at > timedelta(seconds=3.5) and row  # a beat after 1.5 s

    row = await poll(extended, timeout_s=10, interval_s=0.05, what="a heartbeat to extend the held lease")
    assert row.state == "leased" and not cancelled["hold"].is_set()
    # ... until another worker takes it over: its next beat answers LEASE_LOST and cancels it.
    later = datetime.now(timezone.utc) + timedelta(seconds=5)
    await db.transaction(lambda c: c.executions.reap_expired(10, now=later))
    await db.transaction(lambda c: c.executions.lease(queue, "other", 1, 60, now=later))
    await asyncio.wait_for(cancelled["hold"].wait(), 10)
    stop.set()
    await asyncio.wait_for(run, 10)
    assert worker.stats == {"completed": 1, "failed": 1, "lease_lost": 1}


async def test_pools_cli_creates_a_shared_pool_whose_key_leases_granted_tenants_work(
    db: Database, database_url: str, addr: str, tmp_path: Path
) -> None:
    a, b = await tf.tenant(db, "pool-a"), await tf.tenant(db, "pool-b")
    env = {"KAIROS_DATABASE_URL": database_url, "KAIROS_HOME": str(tmp_path)}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return child("pools", *args, env=env)

    made = cli("create", "fleet", "--shared", "--allow", "pool-a", "--json")
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert (created["pool"], created["name"], created["tenants"]) == ("shared/fleet", "fleet", ["pool-a"])
    assert cli("create", "fleet", "--shared").returncode == 2  # taken
    assert cli("create", "x", "--shared", "--allow", "nobody").returncode == 2
    assert cli("create", "shared/", "--shared").returncode == 2
    assert cli("grant", "shared/fleet", "pool-b").returncode == 0  # the name as jobs target it works too
    listed = [json.loads(line) for line in cli("list", "--json").stdout.splitlines()]
    assert listed[0]["pool"] == "shared/fleet" and listed[0]["tenants"] == ["pool-a", "pool-b"]
    assert cli("list").stdout.splitlines() == ["shared/fleet\tpool-a, pool-b"]
    for t in (a, b):
        await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=tf.shared_queue("fleet")))
    async with WorkerClient(addr, created["workerKey"]) as client:
        got = await client.lease("shared/fleet", "fleet-worker", 10)
        assert len(got) == 2
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.lease("elsewhere", "fleet-worker", 1)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED


async def test_buffered_outcomes_are_flushed_on_shutdown(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "jobs")
    good = await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue, payload={"do": "ok"}), 3)
    [bad] = await tf.ready_executions(
        db, await tf.job(db, t.tenant_id, queue=queue, payload={"do": "bad"}, backoff_s=60, max_backoff_s=60)
    )
    handled = 0
    all_handled = asyncio.Event()

    async def handler(execution):
        nonlocal handled
        handled += 1
        if handled == 4:
            all_handled.set()
        if execution.payload["do"] == "bad":
            raise RuntimeError("nope")
        return {"id": execution.execution_id}

    stop = asyncio.Event()
    # A report window far longer than the test: only the shutdown can send these outcomes.
    worker = Worker("jobs", handler, addr=addr, api_key=t.key, wait_seconds=0.2, report_s=3600, report_max=100)
    run = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(all_handled.wait(), 10)

    async def state(eid):
        return (await db.transaction(lambda c: c.executions.get(t.tenant_id, eid))).state

    assert [await state(e) for e in (*good, bad)] == ["leased"] * 4  # buffered, not sent yet
    stop.set()
    await asyncio.wait_for(run, 10)
    assert [await state(e) for e in (*good, bad)] == ["succeeded"] * 3 + ["ready"]
    assert worker.stats == {"completed": 3, "failed": 1, "lease_lost": 0}
    row = await db.transaction(lambda c: c.executions.get(t.tenant_id, good[0]))
    assert row.result == {"id": str(good[0])}


async def test_lease_lost_in_a_batched_complete_discards_the_result(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "jobs")
    [stale] = await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue, payload={"n": 1}))
    started, release = asyncio.Event(), asyncio.Event()

    async def handler(execution):
        if execution.payload["n"] == 1:
            started.set()
            await release.wait()
        return {"by": "sdk", "n": execution.payload["n"]}

    stop = asyncio.Event()
    worker = Worker("jobs", handler, addr=addr, api_key=t.key, lease_seconds=30, wait_seconds=0.2, report_s=0.05)
    run = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(started.wait(), 10)
    # Another worker owns the execution now (attempt 2); the SDK's handler then returns.
    later = datetime.now(timezone.utc) + timedelta(seconds=60)
    await db.transaction(lambda c: c.executions.reap_expired(10, now=later))
    await db.transaction(lambda c: c.executions.lease(queue, "other", 1, 600, now=later))
    [fresh] = await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue, payload={"n": 2}))
    release.set()

    async def reported():
        return worker.stats["lease_lost"] == 1 and worker.stats["completed"] == 1

    await poll(reported, timeout_s=15, interval_s=0.05, what="both outcomes to be reported")
    stop.set()
    await asyncio.wait_for(run, 10)
    history = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, stale))
    assert [(a.attempt, a.outcome) for a in history] == [(1, "discarded"), (2, "running")]
    row = await db.transaction(lambda c: c.executions.get(t.tenant_id, stale))
    assert (row.state, row.result) == ("leased", None)
    assert (await db.transaction(lambda c: c.executions.get(t.tenant_id, fresh))).state == "succeeded"


async def test_shutdown_fails_handlers_still_running_after_the_grace(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "jobs")
    job = await tf.job(db, t.tenant_id, queue=queue, backoff_s=60, max_backoff_s=60)
    [stuck] = await tf.ready_executions(db, job)
    started, cancelled = asyncio.Event(), asyncio.Event()

    async def handler(_execution):
        started.set()
        try:
            await asyncio.Event().wait()  # never finishes by itself
        except asyncio.CancelledError:
            cancelled.set()
            raise

    stop = asyncio.Event()
    worker = Worker("jobs", handler, addr=addr, api_key=t.key, wait_seconds=0.2, grace_s=0.2)
    run = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(started.wait(), 10)
    stop.set()
    await asyncio.wait_for(run, 10)
    assert cancelled.is_set()
    assert worker.stats == {"completed": 0, "failed": 1, "lease_lost": 0}
    row = await db.transaction(lambda c: c.executions.get(t.tenant_id, stuck))
    assert (row.state, row.error) == ("ready", "worker stopped before the handler finished")


async def test_sdk_reports_one_call_per_execution_to_an_executor_without_batched_calls(db: Database) -> None:
    from app.rpc.servicer import WorkerServicer
    from kairos_sdk._proto import worker_pb2_grpc as pb_grpc

    class OldServicer(WorkerServicer):  # an executor from before CompleteMany/FailMany
        CompleteMany = pb_grpc.WorkerServicer.CompleteMany
        FailMany = pb_grpc.WorkerServicer.FailMany

    server = grpc.aio.server()
    servicer = OldServicer(db, Outcomes(db), ServicerConfig(poll_interval_s=0.05))
    pb_grpc.add_WorkerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        t = await tf.tenant(db)
        queue = tf.tenant_queue(t.tenant_id, "jobs")
        ok = await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue, payload={"do": "ok"}), 2)
        [bad] = await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue, payload={"do": "bad"}))

        async def handler(execution):
            if execution.payload["do"] == "bad":
                raise NonRetryable("no")
            return {"ok": 1}

        stop = asyncio.Event()
        worker = Worker("jobs", handler, addr=f"127.0.0.1:{port}", api_key=t.key, wait_seconds=0.2)
        run = asyncio.create_task(worker.run(stop))

        async def done():
            return worker.stats["completed"] == 2 and worker.stats["failed"] == 1

        await poll(done, timeout_s=15, interval_s=0.05, what="outcomes reported one by one")
        stop.set()
        await asyncio.wait_for(run, 10)
        states = [(await db.transaction(lambda c, e=e: c.executions.get(t.tenant_id, e))).state for e in (*ok, bad)]
        assert states == ["succeeded", "succeeded", "dead"]
        assert worker._reporter is not None and not worker._reporter.batched  # it did fall back
    finally:
        servicer.stopping.set()
        await server.stop(0.5)
