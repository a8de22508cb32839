"""Per-tenant durability: `kairos tenants set-critical NAME on|off`, and a critical tenant's submits
committed with synchronous_commit = remote_apply against a real primary with a synchronous standby
(PostgreSQL 15, app/drill/cluster.py); everyone else's commit as before."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import event, text

from app.api.jobs import schemas, service
from app.api.jobs.submit import Created, SubmitWriter
from app.config import Settings
from app.drill.cluster import Cluster, Node, start_pair
from app.store import Database, migrate
from app.store.db import create_engine
from tests import factories
from tests.support.cli import run_kairos
from tests.support.polling import poll

REMOTE_APPLY = "SET LOCAL synchronous_commit = remote_apply"


async def critical_flag(db: Database, tenant_id: uuid.UUID) -> bool:
    return tenant_id in await db.transaction(lambda tx: tx.durability.critical_tenants())


def submission(tenant_id: uuid.UUID) -> Any:
    body = schemas.JobIn(
        name="d", target=schemas.TargetIn(type="queue", ref="work"), schedule=schemas.ScheduleIn(delay_seconds=3600)
    )
    return service.submission(body, Settings(), tenant_id, None, None, datetime.now(timezone.utc))


# -- the command ------------------------------------------------------------------------------------


async def test_set_critical_turns_the_flag_on_and_off(
    db: Database, database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    t = await factories.tenant(db)
    assert not await critical_flag(db, t.tenant_id)  # migration 0013: off by default
    on = await asyncio.to_thread(
        run_kairos,
        monkeypatch,
        capsys,
        "tenants",
        "set-critical",
        t.name,
        "on",
        env={"KAIROS_DATABASE_URL": database_url},
    )
    assert on.code == 0, on.err
    assert on.json() == {"name": t.name, "critical": True}
    assert await critical_flag(db, t.tenant_id)
    off = await asyncio.to_thread(
        run_kairos,
        monkeypatch,
        capsys,
        "tenants",
        "set-critical",
        t.name,
        "off",
        env={"KAIROS_DATABASE_URL": database_url},
    )
    assert off.code == 0 and off.json()["critical"] is False
    assert not await critical_flag(db, t.tenant_id)


@pytest.mark.parametrize("args", [("yes",), ()], ids=["bad-state", "no-state"])
async def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    db: Database,
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
) -> None:
    t = await factories.tenant(db)
    result = await asyncio.to_thread(
        run_kairos,
        monkeypatch,
        capsys,
        "tenants",
        "set-critical",
        t.name,
        *args,
        env={"KAIROS_DATABASE_URL": database_url},
    )
    assert result.code == 2 and result.error_line and result.out == ""
    assert not await critical_flag(db, t.tenant_id)


async def test_an_unknown_tenant_exits_2(
    database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    result = await asyncio.to_thread(
        run_kairos,
        monkeypatch,
        capsys,
        "tenants",
        "set-critical",
        "nobody-here",
        "on",
        env={"KAIROS_DATABASE_URL": database_url},
    )
    assert result.code == 2 and "nobody-here" in result.error_line


# -- the commits ------------------------------------------------------------------------------------


@dataclass
class SyncPair:
    cluster: Cluster
    primary: Node
    standby: Node
    db: Database
    standby_db: Database


@pytest.fixture(scope="module")
async def sync_pair() -> AsyncIterator[SyncPair]:
    cluster, primary, standby = await start_pair(synchronous=True)
    try:
        db = Database(create_engine(primary.url(), pool_size=4))
        await migrate.upgrade(db)
        standby_db = Database(create_engine(standby.url(), isolation="READ COMMITTED", pool_size=1))
        yield SyncPair(cluster, primary, standby, db, standby_db)
        await db.close()
        await standby_db.close()
    finally:
        cluster.close()


def statements_of(db: Database) -> tuple[list[str], Callable[[], None]]:
    sent: list[str] = []

    def record(conn: Any, cursor: Any, statement: str, *args: Any) -> None:
        sent.append(statement.strip())

    event.listen(db.engine.sync_engine, "before_cursor_execute", record)
    return sent, lambda: event.remove(db.engine.sync_engine, "before_cursor_execute", record)


async def _replay(pair: SyncPair, *, pause: bool) -> None:
    fn = "pg_wal_replay_pause" if pause else "pg_wal_replay_resume"
    await factories.raw(pair.standby_db, lambda conn: conn.execute(text(f"SELECT {fn}()")))


async def test_a_critical_tenants_submit_returns_only_once_the_standby_applied_it(sync_pair: SyncPair) -> None:
    db = sync_pair.db
    critical, normal = await factories.tenant(db), await factories.tenant(db)
    await db.transaction(lambda tx: tx.durability.set_critical(critical.tenant_id, True))
    writer = SubmitWriter(db)
    sent, stop = statements_of(db)
    try:
        await _replay(sync_pair, pause=True)
        pending = asyncio.ensure_future(writer.submit([submission(critical.tenant_id)]))
        # A normal tenant's submit is not held up (it is never in the critical one's transaction),
        [done] = await asyncio.wait_for(writer.submit([submission(normal.tenant_id)]), 10)
        assert isinstance(done, Created)

        # and once the standby has made the critical commit durable (flushed) but not applied it,
        # that submit still waits: remote_apply, not only the synchronous flush every commit waits for.
        async def flushed_not_applied() -> bool:
            state = await sync_pair.primary.standby("standby")
            return bool(state and state.flush_lag_bytes == 0 and (state.replay_lag_bytes or 0) > 0)

        await poll(flushed_not_applied, timeout_s=10, what="the standby to flush but not apply")
        assert not pending.done()
        await _replay(sync_pair, pause=False)
        [outcome] = await asyncio.wait_for(pending, 10)
        assert isinstance(outcome, Created)
    finally:
        stop()
        await _replay(sync_pair, pause=False)
    # Exactly the critical tenant's transaction asked for remote_apply.
    assert sent.count(REMOTE_APPLY) == 1

    async def on_standby(conn: Any) -> int:
        return (
            await conn.execute(text("SELECT count(*) FROM jobs WHERE job_id = :j"), {"j": outcome.job_id})
        ).scalar_one()

    assert await factories.raw(sync_pair.standby_db, on_standby) == 1  # applied there when 201 was sent


async def test_turning_critical_off_commits_locally_again(sync_pair: SyncPair) -> None:
    db = sync_pair.db
    t = await factories.tenant(db)
    await db.transaction(lambda tx: tx.durability.set_critical(t.tenant_id, True))
    await db.transaction(lambda tx: tx.durability.set_critical(t.tenant_id, False))
    sent, stop = statements_of(db)
    try:
        [outcome] = await SubmitWriter(db).submit([submission(t.tenant_id)])
    finally:
        stop()
    assert isinstance(outcome, Created)
    assert REMOTE_APPLY not in sent
