"""``Database.statement``: one statement on psycopg directly, in autocommit, with ``transaction``'s
retries, bounds and errors. Against the embedded PostgreSQL; the executor's lease, complete and
heartbeat run this way (tests/rpc and tests/chaos run them end to end)."""

from __future__ import annotations

import asyncio
import socket
import time
from datetime import timezone

import pytest
from sqlalchemy import text

from app import errors
from app.domain.states import ExecutionState
from app.store.db import CONNECT_TIMEOUT_S, DIRECT_POOL_MIN, Database, RetryConfig, create_engine
from app.store.executions import Success
from tests import factories as tf
from tests.support.polling import poll


async def _backend_pids(db: Database) -> set[int]:
    rows = await db.transaction(
        lambda tx: tx.schema._conn.execute(
            text("SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
        )
    )
    return {pid for (pid,) in rows}


async def test_a_lease_and_its_completion_commit_each_on_its_own(db: Database) -> None:
    tenant = await tf.tenant(db, "acme")
    queue = tf.tenant_queue(tenant.tenant_id, "pool")
    job = await tf.job(db, tenant.tenant_id, queue=queue)
    await tf.ready_executions(db, job, 3)

    leased = await db.statement(lambda tx: tx.executions.lease(queue, "w1", 10, 30))
    assert len(leased) == 3 and {e.attempt for e in leased} == {1}
    # Committed already: another transaction sees the leases.
    seen = await db.transaction(lambda tx: tx.executions.get(tenant.tenant_id, leased[0].execution_id))
    assert seen is not None and seen.state == ExecutionState.LEASED and seen.lease_owner == "w1"

    done = [Success(e.execution_id, e.attempt) for e in leased]
    assert await db.statement(lambda tx: tx.executions.complete_many(done)) == {e.execution_id: True for e in leased}
    stale = [Success(leased[0].execution_id, 7)]
    assert await db.statement(lambda tx: tx.executions.complete_many(stale)) == {leased[0].execution_id: False}
    after = await db.transaction(lambda tx: tx.executions.get(tenant.tenant_id, leased[0].execution_id))
    assert after is not None and after.state == ExecutionState.SUCCEEDED
    assert await db.statement(lambda tx: tx.executions.next_ready_in(queue)) is None


async def test_every_session_runs_in_utc_whatever_the_url_asks(database_url: str) -> None:
    """The engine's and the statement pool's sessions run in UTC (the embedded server's own default is
    Etc/UTC, a zone psycopg converts through zoneinfo), a time zone in the URL's options included, so
    the driver hands out ``timezone.utc`` datetimes."""
    sep = "&" if "?" in database_url else "?"
    db = Database(create_engine(f"{database_url}{sep}options=-c%20timezone%3DEurope/Berlin"))
    show = text("SELECT current_setting('TimeZone') AS zone, now() AS at")
    try:
        for rows in (
            await db.transaction(lambda tx: tx.schema._conn.execute(show)),
            await db.statement(lambda tx: tx.schema._conn.execute(show)),
        ):
            [(zone, at)] = list(rows)
            assert zone == "UTC" and at.tzinfo is timezone.utc
    finally:
        await db.close()


async def test_the_statement_pool_keeps_a_floor_of_open_connections(database_url: str) -> None:
    """A burst finds DIRECT_POOL_MIN connections open (started and named) before it, not one."""
    db = Database(create_engine(database_url, pool_size=10, application_name="kairos-test-floor"))
    count = text("SELECT count(*) FROM pg_stat_activity WHERE application_name = 'kairos-test-floor'")

    async def named(tx) -> int:
        return (await tx.schema._conn.execute(count)).scalar_one()

    try:
        assert await db.statement(lambda tx: tx.schema.ping()) is None

        async def opened() -> bool:
            # The floor, plus the engine's own connection (the pool may open one more for a caller that came first).
            return await db.transaction(named) >= DIRECT_POOL_MIN + 1

        # The server's view, until the pool's background opens land.
        await poll(opened, timeout_s=CONNECT_TIMEOUT_S, interval_s=0.02, what="the pool's floor of connections")
    finally:
        await db.close()


async def test_a_second_statement_is_refused(db: Database) -> None:
    async def two(tx) -> None:
        await tx.schema.ping()
        await tx.schema.ping()

    with pytest.raises(RuntimeError, match="runs one statement"):
        await db.statement(two)


async def test_a_serialization_failure_is_run_again_then_given_up(database_url: str) -> None:
    db = Database(create_engine(database_url), RetryConfig(attempts=3, base_s=0.001, max_s=0.002))
    raises = text("DO $$ BEGIN RAISE EXCEPTION 'conflict' USING ERRCODE = '40001'; END $$")
    try:
        with pytest.raises(errors.TransactionRetriesExhausted):
            await db.statement(lambda tx: tx.schema._conn.execute(raises))
        assert db.retries == 2
    finally:
        await db.close()


async def test_other_errors_leave_as_kairos_errors(db: Database) -> None:
    with pytest.raises(errors.StoreRejected):
        await db.statement(lambda tx: tx.schema._conn.execute(text("SELECT CAST('x' AS INT)")))
    with pytest.raises(errors.StoreConflict):
        await db.statement(
            lambda tx: tx.schema._conn.execute(
                text("DO $$ BEGIN RAISE EXCEPTION 'taken' USING ERRCODE = '23505'; END $$")
            )
        )
    assert await db.statement(lambda tx: tx.schema.ping()) is None  # the connection is fine afterwards


async def test_the_engines_statement_timeout_bounds_it_too(database_url: str) -> None:
    db = Database(create_engine(database_url, statement_timeout_s=0.2, application_name="kairos-test-direct"))
    try:
        started = time.monotonic()
        with pytest.raises(errors.DatabaseUnavailable, match="statement timeout"):
            await db.statement(lambda tx: tx.schema._conn.execute(text("SELECT pg_sleep(5)")))
        assert time.monotonic() - started < 3
        names = await db.statement(
            lambda tx: tx.schema._conn.execute(
                text("SELECT DISTINCT application_name FROM pg_stat_activity WHERE datname = current_database()")
            )
        )
        assert ("kairos-test-direct",) in list(names)
    finally:
        await db.close()


async def test_the_client_abandons_a_statement_that_gets_no_answer(database_url: str) -> None:
    db = Database(create_engine(database_url), transaction_timeout_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(errors.DatabaseUnavailable, match=r"no answer from the database within 0\.3 s"):
            await db.statement(lambda tx: tx.schema._conn.execute(text("SELECT pg_sleep(5)")))
        assert time.monotonic() - started < 2
        assert await db.statement(lambda tx: tx.schema.ping()) is None
    finally:
        await db.close()


async def test_connections_killed_by_the_server_cost_one_failed_call(db: Database) -> None:
    """A restarted database (here: every direct connection terminated) fails the call that meets a dead
    connection; the pool then tests the others, and the next call works."""
    await asyncio.gather(
        *(db.statement(lambda tx: tx.schema._conn.execute(text("SELECT pg_sleep(0.05)"))) for _ in range(4))
    )  # several direct connections open
    direct = await _backend_pids(db)
    await db.transaction(
        lambda tx: tx.schema._conn.execute(
            text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = ''"
            )
        )
    )
    failures = 0
    for _ in range(3):
        try:
            await db.statement(lambda tx: tx.schema.ping())
        except errors.DatabaseUnavailable:
            failures += 1
        else:
            break
    assert failures <= 1 and len(direct) >= 2
    assert await db.statement(lambda tx: tx.schema.ping()) is None


async def test_an_unreachable_database_fails_the_call_within_the_connect_bound() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    db = Database(create_engine(f"postgresql+psycopg://kairos@127.0.0.1:{port}/kairos"))
    try:
        started = time.monotonic()
        with pytest.raises(errors.DatabaseUnavailable):
            await db.statement(lambda tx: tx.schema.ping())
        assert time.monotonic() - started < CONNECT_TIMEOUT_S + 3
    finally:
        await db.close()
