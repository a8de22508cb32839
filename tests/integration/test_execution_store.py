"""The execution tier's statements against a real database: fencing, fairness, retries, reaping."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from uuid import UUID

from sqlalchemy import text

from app.domain.backoff import JITTER
from app.store import executions as ex
from app.store.db import Database
from tests import factories as tf

RC = "READ COMMITTED"


async def lease(
    db: Database, queue: str, n: int, lease_s: float = 30, now: datetime | None = None, worker: str = "w1"
) -> list[ex.Leased]:
    return await db.transaction(lambda c: c.executions.lease(queue, worker, n, lease_s, now=now), isolation=RC)


async def sql(db: Database, statement: str, **params) -> list[tuple]:
    return await tf.raw(db, lambda c: _rows(c, statement, params))


async def _rows(conn, statement: str, params: dict) -> list[tuple]:
    return [tuple(r) for r in await conn.execute(text(statement), params)]


async def state_of(db: Database, tenant_id, execution_id) -> ex.Execution:
    return await db.transaction(lambda c: c.executions.get(tenant_id, execution_id))


async def test_lease_bumps_attempt_and_a_stale_attempt_changes_nothing(db: Database) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "emails")
    job = await tf.job(db, t.tenant_id, queue=queue, payload={"n": 1})
    [eid] = await tf.ready_executions(db, job)
    [first] = await lease(db, queue, 10)
    assert first.execution_id == str(eid) and first.attempt == 1 and first.payload == {"n": 1}
    assert await lease(db, queue, 10) == []
    # Expire and re-lease: attempt 2 owns it now.
    later = datetime.now(timezone.utc) + timedelta(seconds=31)
    assert await db.transaction(lambda c: c.executions.reap_expired(100, now=later)) == {"ready": 1, "dead": 0}
    [second] = await lease(db, queue, 10, now=later)
    assert second.attempt == 2
    # The stale holder: heartbeat, complete and fail all change nothing.
    assert await db.transaction(lambda c: c.executions.heartbeat(eid, 1, 30)) is None
    stale = await db.transaction(lambda c: c.executions.complete_many([ex.Success(eid, 1, {"by": "stale"})]))
    assert stale == {eid: False}
    failed = await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, 1, "boom")]))
    assert failed[eid].state is None
    assert (await state_of(db, t.tenant_id, eid)).state == "leased"
    ok = await db.transaction(lambda c: c.executions.complete_many([ex.Success(eid, 2, {"by": "current"})]))
    assert ok == {eid: True}
    # A repeated Complete of the same attempt is idempotent.
    again = [ex.Success(eid, 2, {"by": "current"})]
    assert await db.transaction(lambda c: c.executions.complete_many(again)) == {eid: True}
    row = await state_of(db, t.tenant_id, eid)
    assert row.state == "succeeded" and row.result == {"by": "current"}
    history = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, eid))
    assert [(a.attempt, a.outcome) for a in history] == [(1, "discarded"), (2, "succeeded")]
    assert history[0].result == {"by": "stale"}  # the late result is kept on its own attempt, not the outcome


async def test_batch_answers_are_keyed_by_the_callers_ids_as_text_or_uuid(db: Database) -> None:
    """The lease hands ids out as text; complete_many, fail_many and renew_many key each answer by the very
    object the caller passed (the executor's text, or a UUID), in one call mixing both."""
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "emails")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=3)
    await tf.ready_executions(db, job, 4)
    held = await lease(db, queue, 10)
    assert len(held) == 4 and all(type(h.execution_id) is str and type(h.tenant_id) is str for h in held)
    a, b, c, d = (h.execution_id for h in held)
    renewed = await db.transaction(
        lambda x: x.executions.renew_many([ex.Renewal(a, 1), ex.Renewal(UUID(b), 1), ex.Renewal(UUID(c), 9)], "w1", 60)
    )
    assert set(renewed) == {a, UUID(b)}
    failed = await db.transaction(
        lambda x: x.executions.fail_many([ex.Failure(UUID(c), 1, "later"), ex.Failure(d, 2, "stale")])
    )
    assert failed[UUID(c)].state == "ready" and failed[d].state is None and set(failed) == {UUID(c), d}
    done = await db.transaction(
        lambda x: x.executions.complete_many([ex.Success(a, 1), ex.Success(UUID(b), 1), ex.Success(d, 2)])
    )
    assert done == {a: True, UUID(b): True, d: False}


async def test_the_live_attempt_is_the_execution_row_and_its_attempts_row_is_written_when_it_ends(db: Database) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "emails")
    job = await tf.job(db, t.tenant_id, queue=queue)
    [eid, legacy] = await tf.ready_executions(db, job, 2)
    leased = {UUID(e.execution_id): e for e in await lease(db, queue, 10, worker="w7")}
    assert await sql(db, "SELECT count(*) FROM attempts") == [(0,)]  # nothing written at lease time
    [live] = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, eid))
    assert (live.attempt, live.outcome, live.worker_id, live.finished_at) == (1, "running", "w7", None)
    assert live.lease_until == leased[eid].lease_until
    # A row opened at lease time, as Kairos did before, still ends as its attempt ends (migration 0020 gave
    # such rows their execution's scheduled_for, the conflict target's third column).
    await sql(
        db,
        "INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, "
        "scheduled_for) "
        "SELECT execution_id, attempt, tenant_id, lease_owner, started_at, lease_until, scheduled_for "
        "FROM executions WHERE execution_id = :e RETURNING 1",
        e=legacy,
    )
    done = [ex.Success(eid, 1, {"ok": 1}), ex.Success(legacy, 1, {"ok": 2})]
    assert await db.transaction(lambda c: c.executions.complete_many(done)) == {eid: True, legacy: True}
    for execution_id, n in ((eid, 1), (legacy, 2)):
        [ended] = await db.transaction(lambda c, e=execution_id: c.attempts.list_for_execution(t.tenant_id, e))
        assert (ended.outcome, ended.worker_id, ended.result) == ("succeeded", "w7", {"ok": n})
        assert ended.leased_at is not None and ended.finished_at is not None


async def test_retries_follow_the_backoff_formula_then_dead(db: Database) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=4, backoff_s=10, max_backoff_s=25)
    [eid] = await tf.ready_executions(db, job)
    now = datetime.now(timezone.utc)
    seen = []
    for attempt in range(1, 5):
        [held] = await lease(db, queue, 1, now=now)
        assert held.attempt == attempt
        failed = [ex.Failure(eid, attempt, f"err {attempt}")]
        out = await db.transaction(lambda c, failed=failed: c.executions.fail_many(failed, now=now))
        if attempt < 4:
            assert out[eid].state == "ready"
            delay = (out[eid].retry_at - now).total_seconds()
            nominal = min(25, 10 * 2 ** (attempt - 1))
            assert nominal * (1 - JITTER) - 1e-3 <= delay <= nominal + 1e-3, (attempt, delay)
            seen.append(delay)
            assert await lease(db, queue, 1, now=now) == []  # not before retry_at
            now = out[eid].retry_at
        else:
            assert out[eid].state == "dead"
    assert len(seen) == 3
    row = await state_of(db, t.tenant_id, eid)
    assert row.state == "dead" and row.error == "err 4" and row.finished_at is not None


async def test_non_retryable_failure_is_dead_at_once(db: Database) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=5)
    [eid] = await tf.ready_executions(db, job)
    [held] = await lease(db, queue, 1)
    out = await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "bad input", False)]))
    assert out[eid].state == "dead"


async def test_no_retry_starts_after_the_jobs_max_retry_duration(db: Database) -> None:
    """maxRetryDurationSeconds counts from the first attempt: attempts left do not extend it."""
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=50, backoff_s=10, max_backoff_s=10)

    async def deadline(conn) -> None:
        await conn.execute(text("UPDATE jobs SET max_retry_duration_s = 25 WHERE job_id = :j"), {"j": job})

    await tf.raw(db, deadline)
    [eid] = await tf.ready_executions(db, job)
    now = datetime.now(timezone.utc)
    outcomes = []
    while True:
        [held] = await lease(db, queue, 1, now=now)
        failed = [ex.Failure(eid, held.attempt, "HTTP 503")]
        out = (await db.transaction(lambda c, failed=failed: c.executions.fail_many(failed, now=now)))[eid]
        outcomes.append(out.state)
        if out.state == "dead":
            break
        now = out.retry_at
    # Retries 10 s apart (jitter only shortens them): attempts at 0, ~10, ~20 s; the next would start past 25 s.
    assert 2 <= outcomes.count("ready") <= 3 and outcomes[-1] == "dead"
    row = await state_of(db, t.tenant_id, eid)
    assert row.state == "dead" and "maxRetryDurationSeconds" in row.error and row.attempt < 50


async def test_poison_job_ends_dead_after_max_attempts_expiries(db: Database) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=3)
    [eid] = await tf.ready_executions(db, job)
    now = datetime.now(timezone.utc)
    for attempt in (1, 2, 3):
        [held] = await lease(db, queue, 1, lease_s=5, now=now)
        assert held.attempt == attempt
        now += timedelta(seconds=6)
        reaped = await db.transaction(lambda c: c.executions.reap_expired(10, now=now))
        assert reaped == ({"ready": 1, "dead": 0} if attempt < 3 else {"ready": 0, "dead": 1})
    assert await lease(db, queue, 1, now=now) == []
    row = await state_of(db, t.tenant_id, eid)
    assert row.state == "dead" and "lease expired" in row.error
    history = await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, eid))
    assert [a.outcome for a in history] == ["expired"] * 3


async def test_heartbeat_never_extends_beyond_the_job_timeout(db: Database) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, timeout_s=20)
    [eid] = await tf.ready_executions(db, job)
    now = datetime.now(timezone.utc)
    [held] = await lease(db, queue, 1, lease_s=30, now=now)
    row = await state_of(db, t.tenant_id, eid)
    deadline = row.started_at + timedelta(seconds=20)
    assert held.lease_until == deadline  # the first lease is already capped
    until = await db.transaction(lambda c: c.executions.heartbeat(eid, 1, 8, now=now + timedelta(seconds=5)))
    assert until == now + timedelta(seconds=13)
    until = await db.transaction(lambda c: c.executions.heartbeat(eid, 1, 8, now=now + timedelta(seconds=15)))
    assert until == deadline
    # Past the timeout, a heartbeat is refused: the attempt is over.
    assert await db.transaction(lambda c: c.executions.heartbeat(eid, 1, 8, now=now + timedelta(seconds=21))) is None


async def test_cancelled_execution_makes_the_holder_lose_its_lease(db: Database) -> None:
    t = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue)
    [eid] = await tf.ready_executions(db, job)
    [held] = await lease(db, queue, 1)

    async def cancel(conn):  # what the API or a replace-overlap dispatch does
        await conn.execute(
            text(
                "UPDATE executions SET state = 'cancelled', finished_at = now(), "
                "lease_owner = NULL, lease_until = NULL WHERE execution_id = :e"
            ),
            {"e": eid},
        )

    await tf.raw(db, cancel)
    assert await db.transaction(lambda c: c.executions.heartbeat(eid, held.attempt, 30)) is None
    assert await db.transaction(lambda c: c.executions.complete_many([ex.Success(eid, held.attempt)])) == {eid: False}


async def test_defer_refunds_the_attempt(db: Database) -> None:
    t = await tf.tenant(db)
    job = await tf.job(db, t.tenant_id, queue=tf.HTTP_QUEUE, max_attempts=2)
    [eid] = await tf.ready_executions(db, job)
    [held] = await lease(db, tf.HTTP_QUEUE, 1)
    now = datetime.now(timezone.utc)
    held_refs = [ex.AttemptRef(eid, held.attempt)]
    assert await db.transaction(lambda c: c.executions.defer_many(held_refs, [60], now=now)) == 1
    row = await state_of(db, t.tenant_id, eid)
    assert (row.state, row.attempt, row.max_attempts, row.ready_at) == ("ready", 1, 3, now + timedelta(seconds=60))
    assert await db.transaction(lambda c: c.attempts.list_for_execution(t.tenant_id, eid)) == []


async def test_replay_gives_a_fresh_attempt_budget_and_overrides(db: Database) -> None:
    t = await tf.tenant(db)
    other = await tf.tenant(db)
    queue = tf.tenant_queue(t.tenant_id, "p")
    job = await tf.job(db, t.tenant_id, queue=queue, max_attempts=1, payload={"v": 1})
    [eid] = await tf.ready_executions(db, job)
    [held] = await lease(db, queue, 1)
    await db.transaction(lambda c: c.executions.fail_many([ex.Failure(eid, held.attempt, "nope")]))
    dead = await db.transaction(lambda c: c.executions.list_dead(t.tenant_id, job_id=None, before=None, limit=10))
    assert [(d.execution_id, d.error) for d in dead] == [(eid, "nope")]
    theirs = await db.transaction(lambda c: c.executions.list_dead(other.tenant_id, job_id=None, before=None, limit=10))
    assert theirs == []
    assert await db.transaction(lambda c: c.executions.replay(other.tenant_id, eid)) is None
    replayed = await db.transaction(lambda c: c.executions.replay(t.tenant_id, eid, payload={"v": 2}, max_attempts=2))
    assert replayed is not None and replayed.max_attempts == 3
    [again] = await lease(db, queue, 1)
    assert again.attempt == 2 and again.payload == {"v": 2}
    assert await db.transaction(lambda c: c.executions.replay(t.tenant_id, eid)) is None  # not dead any more


async def test_in_flight_limit_per_tenant_and_queue(db: Database) -> None:
    t = await tf.tenant(db)
    await db.transaction(lambda c: c.tenants.set_quota(t.tenant_id, max_inflight=3))
    job = await tf.job(db, t.tenant_id, queue=tf.shared_queue("fleet"))
    await tf.ready_executions(db, job, 10)
    assert len(await lease(db, tf.shared_queue("fleet"), 10)) == 3
    assert await lease(db, tf.shared_queue("fleet"), 10) == []
    # A quota lowered below what is already in flight leases nothing (and is no error).
    await db.transaction(lambda c: c.tenants.set_quota(t.tenant_id, max_inflight=1))
    assert await lease(db, tf.shared_queue("fleet"), 10) == []


async def test_weights_share_a_batch(db: Database) -> None:
    a, b = await tf.tenant(db), await tf.tenant(db)
    await db.transaction(lambda c: c.tenants.set_quota(a.tenant_id, weight=3))
    queue = tf.shared_queue("fleet")
    for t in (a, b):
        await tf.ready_executions(db, await tf.job(db, t.tenant_id, queue=queue), 100)
    got = await lease(db, queue, 40)
    by_tenant = {str(a.tenant_id): 0, str(b.tenant_id): 0}  # leased ids are text
    for held in got:
        by_tenant[held.tenant_id] += 1
    assert by_tenant == {str(a.tenant_id): 30, str(b.tenant_id): 10}


async def test_fairness_shared_pool_50000_backlog_does_not_delay_50(db: Database) -> None:
    """Tenant A has 50,000 ready in a shared pool; B's 50 are all leased within two batches."""
    a, b = await tf.tenant(db), await tf.tenant(db)
    await db.transaction(lambda c: c.tenants.set_quota(a.tenant_id, max_inflight=100_000))
    queue = tf.shared_queue("fleet")
    job_a = await tf.job(db, a.tenant_id, queue=queue)
    old = datetime.now(timezone.utc) - timedelta(hours=1)
    await tf.insert_ready(db, [job_a] * 50_000, [old + timedelta(milliseconds=i) for i in range(50_000)])
    job_b = await tf.job(db, b.tenant_id, queue=queue)
    b_ids = set(await tf.ready_executions(db, job_b, 50))
    leased_b: set = set()
    for _ in range(2):
        batch = await lease(db, queue, 50)
        assert len(batch) == 50
        leased_b |= {UUID(x.execution_id) for x in batch if x.tenant_id == str(b.tenant_id)}
    assert leased_b == b_ids
