"""Bounds on every database call, and the shard leaser when the database stops answering.

Against the embedded PostgreSQL: the server ends a statement that runs past the statement timeout
and a session left idle inside a transaction; the client abandons a transaction that gets no answer;
a leaser whose tick hangs drops its shards at the lease deadline; one that cannot make progress
hands its shards back; a tier started while its database is unreachable waits instead of exiting.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from sqlalchemy import text

from app import errors
from app.cli.runtime import open_database_patiently
from app.config import load
from app.scheduler.leases import LeaserConfig, Ownership, ShardLeaser
from app.store.db import Database, create_engine, translate
from tests.chaos.conftest import owners
from tests.support.polling import poll


async def test_the_server_ends_a_statement_past_the_statement_timeout(database_url: str) -> None:
    db = Database(create_engine(database_url, statement_timeout_s=0.2))
    try:
        started = time.monotonic()
        async with db.engine.connect() as conn:
            with pytest.raises(Exception) as raised:
                await conn.execute(text("SELECT pg_sleep(5)"))
        assert time.monotonic() - started < 3
        failure = translate(raised.value)  # type: ignore[arg-type]
        assert isinstance(failure, errors.DatabaseUnavailable), failure
        assert "statement timeout" in failure.detail
    finally:
        await db.close()


async def test_the_server_ends_a_session_left_idle_inside_a_transaction(database_url: str) -> None:
    db = Database(create_engine(database_url, statement_timeout_s=0.3))
    try:

        async def idle(tx) -> None:
            await tx.schema.ping()
            await asyncio.sleep(1.0)  # a client paused mid-transaction (its locks would be held)
            await tx.schema.ping()

        with pytest.raises(errors.DatabaseUnavailable):
            await db.transaction(idle)
        await db.transaction(lambda tx: tx.schema.ping())  # the pool recovers at once
    finally:
        await db.close()


async def test_the_client_abandons_a_transaction_that_gets_no_answer(database_url: str) -> None:
    db = Database(create_engine(database_url), transaction_timeout_s=0.3)
    try:

        async def hangs(tx) -> None:
            await tx.schema.ping()
            await asyncio.Event().wait()  # a database that never answers, as far as the caller can tell

        started = time.monotonic()
        with pytest.raises(errors.DatabaseUnavailable, match=r"no answer from the database within 0\.3 s"):
            await db.transaction(hangs)
        assert time.monotonic() - started < 2
        await db.transaction(lambda tx: tx.schema.ping())
    finally:
        await db.close()


class Hanging:
    """A Database whose transactions never return (a server that stopped answering)."""

    async def transaction(self, work, **_kwargs):
        await asyncio.Event().wait()


async def test_a_leaser_whose_tick_hangs_drops_its_shards_at_the_lease_deadline(db: Database) -> None:
    ownership = Ownership()
    leaser = ShardLeaser(db, "hangs", ownership, LeaserConfig(ttl_s=1.0))
    await leaser.run_once()
    assert len(ownership.held) == 256
    renewed = time.monotonic()
    leaser.db = Hanging()  # type: ignore[assignment]
    tick = asyncio.ensure_future(leaser.renew_in_time())
    while ownership.held:
        await asyncio.sleep(0.01)
        assert time.monotonic() - renewed < 2.0, "the shards outlived their lease"
    dropped_s = time.monotonic() - renewed
    assert 0.5 < dropped_s < 1.5  # at the deadline (TTL 1 s after the renewal began), not before
    with pytest.raises(errors.DatabaseUnavailable, match="shard leases not renewed"):
        await tick


async def test_a_leaser_that_may_not_hold_hands_every_shard_back_and_leaves(db: Database) -> None:
    ownership = Ownership()
    leaser = ShardLeaser(db, "stalled", ownership, LeaserConfig(ttl_s=5.0, interval_s=0.05))
    await leaser.run_once()
    assert set((await owners(db)).values()) == {"stalled"}
    stop, allowed = asyncio.Event(), [False]
    run = asyncio.create_task(leaser.run(stop, may_hold=lambda: allowed[0]))
    try:

        async def handed_back() -> bool:
            return set((await owners(db)).values()) == {None}

        async def taking_part() -> bool:
            return len(ownership.held) == 256

        await poll(handed_back, timeout_s=5, interval_s=0.05, what="the shards to be handed back")
        assert not ownership.held
        allowed[0] = True  # the sit-out is over: it takes its share again
        await poll(taking_part, timeout_s=10, interval_s=0.05, what="the leaser to take part again")
    finally:
        stop.set()
        await run


async def test_a_tier_started_while_its_database_is_unreachable_waits_for_it(tmp_path) -> None:
    settings = load(
        {"KAIROS_DATABASE_URL": f"postgresql://postgres@/postgres?host={tmp_path}", "KAIROS_HOME": str(tmp_path)}
    )
    stop = asyncio.Event()
    waiting = asyncio.create_task(open_database_patiently(settings, "scheduler", stop))
    await asyncio.sleep(1.0)
    assert not waiting.done()  # no database: it keeps trying instead of failing
    stop.set()
    assert await asyncio.wait_for(waiting, 10) is None


async def test_healthz_on_the_probe_port_names_a_silent_loop_and_carries_the_token() -> None:
    from app.observability.probes import Liveness, serve_probes

    async def nothing() -> bytes:
        return b""

    async def ready() -> None:
        return None

    live = Liveness()
    server = await serve_probes("127.0.0.1", 0, metrics=nothing, ready=ready, live=live.silent, token="t0k")
    assert server is not None
    port = server.sockets[0].getsockname()[1]
    try:
        async with httpx.AsyncClient() as client:
            ok = await client.get(f"http://127.0.0.1:{port}/healthz")
            assert (ok.status_code, ok.json()) == (200, {"status": "ok", "supervisorToken": "t0k"})
            live.watch("scheduler.leaser", lambda: "the shard leaser has not finished a pass for 60 s")
            wedged = await client.get(f"http://127.0.0.1:{port}/healthz")
            assert wedged.status_code == 503
            assert wedged.json() == {
                "status": "wedged",
                "reason": "the shard leaser has not finished a pass for 60 s",
                "supervisorToken": "t0k",
            }
    finally:
        server.close()
