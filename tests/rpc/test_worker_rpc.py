"""The gRPC worker protocol over a real socket: credentials, pools, fencing, long poll, codegen."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from uuid import UUID

import grpc
import pytest

from app.store.db import Database
from kairos_sdk import WorkerClient
from kairos_sdk._proto import worker_pb2 as pb
from kairos_sdk._proto import worker_pb2_grpc as pb_grpc
from scripts import codegen
from tests import factories as tf

ROOT = Path(__file__).resolve().parents[2]


def test_generated_modules_are_fresh(tmp_path: Path) -> None:
    """`make proto` would not change the committed modules."""
    subprocess.run(
        [sys.executable, "-m", "scripts.codegen", "--out", str(tmp_path)], check=True, cwd=ROOT, capture_output=True
    )
    for name in codegen.GENERATED:
        fresh = (tmp_path / codegen.PACKAGE / name).read_text()
        committed = (codegen.SDK / codegen.PACKAGE / name).read_text()
        assert fresh == committed, f"{codegen.PACKAGE}/{name} is stale: run `make proto`"


async def test_missing_or_unknown_key_is_unauthenticated(db: Database, addr: str) -> None:
    for key in ("", "kairos_not-a-real-key"):
        async with WorkerClient(addr, key) as client:
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.lease("emails", "w", 1)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "key" in err.value.details()
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await client.complete("00000000-0000-0000-0000-000000000000", 1)
            assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_pool_key_serves_only_its_shared_pool(db: Database, addr: str) -> None:
    a = await tf.tenant(db)
    key = await db.transaction(lambda c: c.pools.create("fleet", [a.tenant_id]))
    other_key = await db.transaction(lambda c: c.pools.create("other", [a.tenant_id]))
    job = await tf.job(db, a.tenant_id, queue=tf.shared_queue("fleet"))
    [eid] = await tf.ready_executions(db, job)
    async with WorkerClient(addr, key) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.lease("other", "w", 1)
        assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "fleet" in err.value.details()
        # The shared pool's executions are not the tenant's own pool of that name either.
        async with WorkerClient(addr, a.key) as tenant_client:
            assert await tenant_client.lease("fleet", "w", 10) == []
        [held] = await client.lease("fleet", "w", 10)
        assert held.execution_id == str(eid)
    # Another pool's key cannot complete it.
    async with WorkerClient(addr, other_key) as intruder:
        assert (await intruder.complete(str(eid), held.attempt, {"x": 1})).lease_lost
        assert (await intruder.heartbeat(str(eid), held.attempt)).lease_lost
    async with WorkerClient(addr, key) as client:
        assert (await client.complete(str(eid), held.attempt, {"ok": True})).outcome == "ok"


async def test_tenant_key_serves_only_its_own_pools(db: Database, addr: str) -> None:
    a, b = await tf.tenant(db), await tf.tenant(db)
    job_a = await tf.job(db, a.tenant_id, queue=tf.tenant_queue(a.tenant_id, "emails"))
    job_b = await tf.job(db, b.tenant_id, queue=tf.tenant_queue(b.tenant_id, "emails"))
    [ea] = await tf.ready_executions(db, job_a)
    [eb] = await tf.ready_executions(db, job_b)
    async with WorkerClient(addr, a.key) as client_a, WorkerClient(addr, b.key) as client_b:
        [held] = await client_a.lease("emails", "a", 10)
        assert held.execution_id == str(ea)  # not B's "emails"
        # B cannot touch A's execution: nothing changes, and A still completes it.
        assert (await client_b.fail(str(ea), held.attempt, "hijack", retryable=False)).lease_lost
        assert (await client_a.complete(str(ea), held.attempt)).outcome == "ok"
        [held_b] = await client_b.lease("emails", "b", 10)
        assert held_b.execution_id == str(eb)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client_a.lease("bad pool name!", "a", 1)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_a_leased_payload_is_compact_json_on_the_wire(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    payload = {"a": [1, 2.5, None, True, "é"], "quote": '"\\\n', "big": 123456789012345678901234567890}
    job = await tf.job(db, t.tenant_id, queue=tf.tenant_queue(t.tenant_id, "p"), payload=payload)
    empty = await tf.job(db, t.tenant_id, queue=tf.tenant_queue(t.tenant_id, "p"), payload={})
    await tf.ready_executions(db, job)
    await tf.ready_executions(db, empty)
    async with grpc.aio.insecure_channel(addr) as channel:
        answer = await pb_grpc.WorkerStub(channel).Lease(
            pb.LeaseRequest(pool="p", worker_id="w", max=2), metadata=(("authorization", f"Bearer {t.key}"),)
        )
    by_job = {e.job_id: e.payload for e in answer.executions}
    # JSONB's key order; no spaces; text as UTF-8 (json.loads reads it as the \u escapes it replaced).
    assert (
        by_job[str(job)]
        == '{"a":[1,2.5,null,true,"é"],"big":123456789012345678901234567890,"quote":"\\"\\\\\\n"}'.encode()
    )
    assert json.loads(by_job[str(job)]) == payload
    assert by_job[str(empty)] == b"{}"


async def test_fencing_results_over_the_wire(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=2, backoff_s=30, max_backoff_s=30)
    [eid] = await tf.ready_executions(db, job)
    async with WorkerClient(addr, t.key) as client:
        [first] = await client.lease("p", "w1", 1, lease_seconds=5)
        assert first.attempt == 1 and first.payload == {"hello": "world"}
        assert first.idempotency_key.startswith(f"{job}:")
        beat = await client.heartbeat(str(eid), 1, 5)
        assert beat.outcome == "ok" and beat.at is not None
        # The lease expires and the reaper hands it to attempt 2.
        later = datetime.now(timezone.utc) + timedelta(seconds=6)
        await db.transaction(lambda c: c.executions.reap_expired(10, now=later))
        await db.transaction(lambda c: c.executions.lease(queue, "w2", 1, 30, now=later))
        assert (await client.heartbeat(str(eid), 1)).lease_lost
        lost = await client.complete(str(eid), 1, {"late": True})
        assert lost.lease_lost and "discarded" in lost.message
        failed = await client.fail(str(eid), 2, "boom")
        assert failed.outcome == "dead"  # attempt 2 of 2
    row = await db.transaction(lambda c: c.executions.get(t.tenant_id, eid))
    assert row.state == "dead" and row.result is None
    history = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, eid))
    assert [(a.attempt, a.outcome) for a in history] == [(1, "discarded"), (2, "failed")]
    assert history[0].result == {"late": True}


async def test_fail_schedules_a_retry_with_backoff(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=tf.tenant_queue(t.tenant_id, "p"), backoff_s=40, max_backoff_s=100)
    [eid] = await tf.ready_executions(db, job)
    async with WorkerClient(addr, t.key) as client:
        [held] = await client.lease("p", "w", 1)
        before = datetime.now(timezone.utc)
        answer = await client.fail(str(eid), held.attempt, "try later")
        after = datetime.now(timezone.utc)
    assert answer.outcome == "retry_scheduled"
    assert before + timedelta(seconds=40 * 0.8) - timedelta(seconds=1) <= answer.at <= after + timedelta(seconds=40)


async def test_lease_is_a_long_poll(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=tf.tenant_queue(t.tenant_id, "p"))
    async with WorkerClient(addr, t.key) as client:
        started = time.monotonic()
        assert await client.lease("p", "w", 1, wait_seconds=0.5) == []
        assert time.monotonic() - started >= 0.45  # it waited
        call = asyncio.ensure_future(client.lease("p", "w", 1, wait_seconds=20))
        await asyncio.sleep(0.2)  # let the poll start waiting (the assertion below is on its answer)
        assert not call.done()
        inserted_at = time.monotonic()
        [eid] = await tf.ready_executions(db, job)
        [held] = await asyncio.wait_for(call, 10)
        assert held.execution_id == str(eid)
        assert time.monotonic() - inserted_at < 2.0  # answered as soon as work was ready, not after 20 s


async def _stale_and_current(db: Database, client: WorkerClient, t, queue: str, pool: str):
    """One execution whose attempt 1 went stale (re-leased as attempt 2 elsewhere), then two held at attempt 1."""
    stale_job = await tf.job(db, t.tenant_id, queue=queue)
    [stale] = await tf.ready_executions(db, stale_job)
    [held] = await client.lease(pool, "w1", 10, lease_seconds=5)
    assert held.execution_id == str(stale)
    later = datetime.now(timezone.utc) + timedelta(seconds=6)
    await db.transaction(lambda c: c.executions.reap_expired(10, now=later))
    [again] = await db.transaction(lambda c: c.executions.lease(queue, "w2", 10, 60, now=later))
    assert again.attempt == 2
    job = await tf.job(db, t.tenant_id, queue=queue)
    await tf.ready_executions(db, job, 2)
    current = await client.lease(pool, "w1", 10)
    assert len(current) == 2 and {e.attempt for e in current} == {1}
    return stale, current


async def test_complete_many_fences_each_item(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    async with WorkerClient(addr, t.key) as client:
        stale, [b, c] = await _stale_and_current(db, client, t, queue, "p")
        answers = await client.complete_many(
            [(b.execution_id, 1, {"n": "b"}), (str(stale), 1, {"late": True}), (c.execution_id, 1, None)]
        )
        assert [a.outcome for a in answers] == ["ok", "lease_lost", "ok"]  # in request order
        assert "discarded" in answers[1].message
        # Sending the same batch again changes nothing and answers the same.
        again = await client.complete_many([(b.execution_id, 1, {"n": "b"}), (str(stale), 1, {"late": True})])
        assert [a.outcome for a in again] == ["ok", "lease_lost"]
    rows = {
        e: await db.transaction(lambda conn, e=e: conn.executions.get(t.tenant_id, e))
        for e in (stale, UUID(b.execution_id), UUID(c.execution_id))
    }
    assert (rows[stale].state, rows[stale].attempt, rows[stale].result) == ("leased", 2, None)
    assert (rows[UUID(b.execution_id)].state, rows[UUID(b.execution_id)].result) == ("succeeded", {"n": "b"})
    assert rows[UUID(c.execution_id)].state == "succeeded"
    history = await db.transaction(lambda conn: conn.attempts.list_for_execution(t.tenant_id, stale))
    assert [(a.attempt, a.outcome, a.result) for a in history] == [
        (1, "discarded", {"late": True}),
        (2, "running", None),
    ]


async def test_batched_calls_touch_only_executions_the_credential_covers(db: Database, addr: str) -> None:
    a, b = await tf.tenant(db), await tf.tenant(db)
    [ea] = await tf.ready_executions(db, await tf.job(db, a.tenant_id, queue=tf.tenant_queue(a.tenant_id, "p")))
    [eb] = await tf.ready_executions(db, await tf.job(db, b.tenant_id, queue=tf.tenant_queue(b.tenant_id, "p")))
    async with WorkerClient(addr, a.key) as client_a, WorkerClient(addr, b.key) as client_b:
        [held_a] = await client_a.lease("p", "a", 10)
        [held_b] = await client_b.lease("p", "b", 10)
        answers = await client_b.complete_many(
            [(str(ea), held_a.attempt, {"hijack": 1}), (str(eb), held_b.attempt, {"mine": 1})]
        )
        assert [x.outcome for x in answers] == ["lease_lost", "ok"]
        failed = await client_b.fail_many([(str(ea), held_a.attempt, "hijack", False)])
        assert [x.outcome for x in failed] == ["lease_lost"]
        row = await db.transaction(lambda c: c.executions.get(a.tenant_id, ea))
        assert (row.state, row.attempt, row.result, row.error) == ("leased", 1, None, None)  # unchanged
        history = await db.transaction(lambda c: c.attempts.list_for_execution(a.tenant_id, ea))
        assert [(h.attempt, h.outcome, h.result) for h in history] == [(1, "running", None)]
        assert [x.outcome for x in await client_a.complete_many([(str(ea), held_a.attempt, None)])] == ["ok"]


async def test_fail_many_schedules_retries_and_dead_letters_per_item(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    async with WorkerClient(addr, t.key) as client:
        stale, _ = await _stale_and_current(db, client, t, queue, "p")
        retry_job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=3, backoff_s=40, max_backoff_s=100)
        last_job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=1)
        fatal_job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=5)
        ids = {
            name: (await tf.ready_executions(db, j))[0]
            for name, j in (("retry", retry_job), ("last", last_job), ("fatal", fatal_job))
        }
        held = {UUID(e.execution_id): e for e in await client.lease("p", "w", 10)}
        assert set(ids.values()) <= set(held)
        before = datetime.now(timezone.utc)
        answers = await client.fail_many(
            [
                (str(ids["retry"]), held[ids["retry"]].attempt, "try later", True),
                (str(stale), 1, "late error", True),
                (str(ids["last"]), held[ids["last"]].attempt, "out of attempts", True),
                (str(ids["fatal"]), held[ids["fatal"]].attempt, "never works", False),
            ]
        )
        after = datetime.now(timezone.utc)
    assert [a.outcome for a in answers] == ["retry_scheduled", "lease_lost", "dead", "dead"]
    assert before + timedelta(seconds=40 * 0.8) - timedelta(seconds=1) <= answers[0].at <= after + timedelta(seconds=40)
    assert all(a.at is None for a in answers[1:])
    rows = {n: await db.transaction(lambda c, e=e: c.executions.get(t.tenant_id, e)) for n, e in ids.items()}
    assert (rows["retry"].state, rows["retry"].ready_at, rows["retry"].error) == ("ready", answers[0].at, "try later")
    assert (rows["last"].state, rows["fatal"].state, rows["fatal"].error) == ("dead", "dead", "never works")
    row = await db.transaction(lambda c: c.executions.get(t.tenant_id, stale))
    assert (row.state, row.attempt) == ("leased", 2) and row.error.startswith("lease expired")  # not "late error"
    history = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, stale))
    assert [(a.attempt, a.outcome) for a in history] == [(1, "discarded"), (2, "running")]


async def test_an_execution_id_in_another_spelling_is_the_same_execution(db: Database, addr: str) -> None:
    """The executor keys its leases by the canonical text the lease hands out: an id in upper case, in braces
    or without hyphens (any spelling a UUID parser reads) is that execution; one id in two spellings is refused."""
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=5)
    await tf.ready_executions(db, job, 4)
    async with WorkerClient(addr, t.key) as client:
        held = await client.lease("p", "w", 10)
        assert len(held) == 4 and all(h.execution_id == str(UUID(h.execution_id)) for h in held)  # canonical text
        upper, braced, bare, failing = held
        spelled = [upper.execution_id.upper(), "{" + braced.execution_id + "}", UUID(bare.execution_id).hex]
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.complete_many([(upper.execution_id, 1, None), (spelled[0], 1, None)])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "twice" in (err.value.details() or "")
        answers = await client.complete_many([(eid, 1, {"n": i}) for i, eid in enumerate(spelled)])
        assert [a.outcome for a in answers] == ["ok", "ok", "ok"]
        assert [a.outcome for a in await client.fail_many([(failing.execution_id.upper(), 1, "no", True)])] == [
            "retry_scheduled"
        ]
        assert (await client.heartbeat(spelled[0], 1)).outcome == "lease_lost"  # succeeded: no longer current
    for i, h in enumerate(held[:3]):
        row = await db.transaction(lambda c, e=h.execution_id: c.executions.get(t.tenant_id, UUID(e)))
        assert (row.state, row.result) == ("succeeded", {"n": i})
    row = await db.transaction(lambda c: c.executions.get(t.tenant_id, UUID(failing.execution_id)))
    assert (row.state, row.error) == ("ready", "no")


async def test_batched_calls_refuse_malformed_batches(db: Database, addr: str) -> None:
    t = await tf.tenant(db)
    eid = "00000000-0000-0000-0000-000000000001"
    async with WorkerClient(addr, t.key) as client:
        for call in (
            client.complete_many([(eid, 1, None), (eid, 2, None)]),
            client.complete_many([("not-a-uuid", 1, None)]),
            client.fail_many([(eid, 1, "x", True), (eid, 1, "y", True)]),
        ):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await call
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert await client.complete_many([]) == []
        assert [a.outcome for a in await client.complete_many([(eid, 1, None)])] == ["lease_lost"]  # unknown id
    async with WorkerClient(addr, "kairos_not-a-real-key") as intruder:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await intruder.complete_many([(eid, 1, None)])
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_nul_in_a_worker_id_or_an_error_is_invalid_argument_and_changes_nothing(
    db: Database, addr: str
) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue)
    [eid] = await tf.ready_executions(db, job)
    async with WorkerClient(addr, t.key) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.lease("p", "w\x001", 1)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "NUL" in err.value.details()
        [held] = await client.lease("p", "w1", 1)  # the refused call leased nothing
        assert held.execution_id == str(eid)
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.fail(str(eid), held.attempt, "bad\x00news", retryable=True)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "NUL" in err.value.details()
        assert (await client.complete(str(eid), held.attempt)).outcome == "ok"  # still the current attempt
