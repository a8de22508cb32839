"""A dispatch batch that keeps losing serialization conflicts slows the dispatcher down, loses nothing."""

from __future__ import annotations

import asyncio

from sqlalchemy import text

from app.scheduler.dispatcher import CLEAN_BATCHES_TO_GROW, Dispatcher, DispatcherConfig
from app.store.db import Database, RetryConfig
from tests.integration.test_scheduler_duties import T0, new_tenant, node, rows, seed
from tests.support.clocks import ManualClock


async def test_conflicting_batches_halve_the_batches_in_flight_and_are_requeued(db: Database) -> None:
    clock = ManualClock(T0)
    tenant = await new_tenant(db)
    a = node(db, clock, "a")
    await a.leaser.run_once()
    job_ids = await seed(db, tenant, 10, T0)
    await a.loader.run_once()
    # The same engine, but a transaction that conflicts once is given up at once (SERIALIZABLE).
    impatient = Database(db.engine, RetryConfig(attempts=1))
    a.dispatcher = Dispatcher(impatient, "a", a.heap, DispatcherConfig(isolation=None), clock.wall)
    assert a.dispatcher.inflight_limit == 3

    async with db.engine.connect() as holder:
        await holder.execute(text("BEGIN ISOLATION LEVEL SERIALIZABLE"))
        await holder.execute(
            text("UPDATE due_index SET tenant_id = tenant_id WHERE job_id = ANY(:ids)"), {"ids": job_ids}
        )
        dispatching = asyncio.create_task(a.dispatcher.run_once())

        async def blocked() -> bool:
            waiting = await rows(db, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            return waiting[0][0] > 0

        for _ in range(200):
            if await blocked():
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the dispatch transaction never waited on the held rows")
        await holder.execute(text("COMMIT"))
    result = await dispatching
    # The batch gave up once, went back to the heap, and the same pass dispatched it again.
    assert (result.failed, result.ready) == (10, 10)
    assert a.dispatcher.inflight_limit == 1
    assert (await rows(db, "SELECT count(*) FROM executions"))[0][0] == 10

    more = await seed(db, tenant, CLEAN_BATCHES_TO_GROW, T0)
    await a.loader.run_once()
    for job_id in more[1:]:
        entries = a.heap.pop_due(clock.wall().timestamp(), 1)
        assert entries, job_id
        await a.dispatcher.dispatch(entries)
    assert a.dispatcher.inflight_limit == 2
