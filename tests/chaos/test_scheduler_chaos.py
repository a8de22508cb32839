"""Real `kairos scheduler` processes killed, paused and added while jobs fall due.

Every test checks the same invariants in the database afterwards: each one-off job has exactly
one execution, each cron job's executions are consecutive minutes with none missing and none
twice, and nothing is left in due_index that should have run.
"""

from __future__ import annotations

import itertools
import signal
import time
from datetime import datetime, timedelta, timezone
from uuid import UUID

import pytest
from sqlalchemy import text

from app.store.db import Database
from tests import factories
from tests.chaos.conftest import new_tenants, owners, query, seed_spread
from tests.support.polling import poll

pytestmark = pytest.mark.slow

TTL_S = 3.0
LOADER_S = 1.0


async def all_owned_evenly(db: Database, n: int) -> dict[int, str | None] | None:
    got = await owners(db)
    counts: dict[str, int] = {}
    for owner in got.values():
        if owner is None:
            return None
        counts[owner] = counts.get(owner, 0) + 1
    if len(counts) == n and max(counts.values()) - min(counts.values()) <= 1:
        return got
    return None


async def dispatched(db: Database, job_ids: list[UUID]) -> int:
    [(n,)] = await query(db, "SELECT count(DISTINCT job_id) FROM executions WHERE job_id = ANY(:ids)", ids=job_ids)
    return n


async def assert_one_offs_dispatched_exactly_once(db: Database, job_ids: list[UUID]) -> None:
    got = await query(
        db, "SELECT job_id, count(*) AS n FROM executions WHERE job_id = ANY(:ids) GROUP BY job_id", ids=job_ids
    )
    counts = {r.job_id: r.n for r in got}
    missing = [j for j in job_ids if j not in counts]
    twice = {j: n for j, n in counts.items() if n != 1}
    assert not missing, f"{len(missing)} occurrences lost"
    assert not twice, f"{len(twice)} occurrences dispatched more than once"
    [(left,)] = await query(db, "SELECT count(*) FROM due_index WHERE job_id = ANY(:ids)", ids=job_ids)
    assert left == 0


async def assert_cron_chains_unbroken(db: Database, job_ids: list[UUID]) -> None:
    async def read(conn):  # one snapshot: the schedulers may still be running
        history = (
            await conn.execute(
                text(
                    "SELECT job_id, scheduled_for FROM executions WHERE job_id = ANY(:ids) "
                    "ORDER BY job_id, scheduled_for"
                ),
                {"ids": job_ids},
            )
        ).all()
        due_rows = (
            await conn.execute(
                text("SELECT job_id, nominal_at FROM due_index WHERE job_id = ANY(:ids)"), {"ids": job_ids}
            )
        ).all()
        return history, due_rows

    got, due_rows = await factories.raw(db, read, isolation="REPEATABLE READ")
    by_job: dict[UUID, list[datetime]] = {}
    for r in got:
        by_job.setdefault(r.job_id, []).append(r.scheduled_for)
    due = {r.job_id: r.nominal_at for r in due_rows}
    for job_id in job_ids:
        times = by_job.get(job_id, [])
        assert times, "a cron job never ran"
        steps = {(b - a) for a, b in itertools.pairwise(times)}
        assert steps <= {timedelta(minutes=1)}, f"gap or duplicate in a cron chain: {times}"
        assert due[job_id] == times[-1] + timedelta(minutes=1), "the chain's next occurrence is missing"


async def test_sigkill_one_of_three_schedulers_loses_and_duplicates_nothing(db: Database, spawn_scheduler) -> None:
    tenants = await new_tenants(db, 4)
    first = datetime.now(timezone.utc) + timedelta(seconds=8)
    once = await seed_spread(db, tenants, 20_000, first, 60)
    crons = await seed_spread(db, tenants, 200, first, 0, cron="* * * * *")
    procs = [spawn_scheduler(f"s{i}") for i in range(3)]
    await poll(lambda: all_owned_evenly(db, 3), timeout_s=30, what="three schedulers to split the shards")
    # Half-way through the due window, SIGKILL one of them.
    half_way = first + timedelta(seconds=30)
    await poll(lambda: _after(half_way), timeout_s=60, what="half-way")
    victim = procs[1]
    victim_owner = victim.owner()
    assert victim_owner, "the victim never logged its owner id"
    its_shards = [s for s, o in (await owners(db)).items() if o == victim_owner]
    assert len(its_shards) in (85, 86)
    assert await dispatched(db, once) > 1000  # it really was dispatching when it died
    victim.signal(signal.SIGKILL)
    killed_at = time.monotonic()

    async def taken_over() -> bool:
        got = await owners(db)
        return all(got[s] not in (None, victim_owner) for s in its_shards)

    await poll(taken_over, timeout_s=30, interval_s=0.05, what="the survivors to take the dead scheduler's shards")
    takeover_s = time.monotonic() - killed_at
    # Its leases were renewed at most one leaser tick (1 s) before the kill, so they expire within
    # TTL; a survivor takes them at its next tick. Slack for a saturated 2-core box.
    assert takeover_s <= TTL_S + LOADER_S + 1.0, takeover_s
    await poll(
        lambda: _equals(dispatched(db, once), len(once)),
        timeout_s=90,
        interval_s=0.5,
        what="every one-off job to be dispatched",
    )
    await assert_one_offs_dispatched_exactly_once(db, once)
    await assert_cron_chains_unbroken(db, crons)
    for p in (procs[0], procs[2]):
        assert p.terminate() == 0
    print(f"takeover after SIGKILL: {takeover_s:.2f}s")


async def test_a_paused_scheduler_is_fenced_after_losing_its_shards(db: Database, spawn_scheduler) -> None:
    tenants = await new_tenants(db, 3)
    first = datetime.now(timezone.utc) + timedelta(seconds=6)
    once = await seed_spread(db, tenants, 4000, first, 25)
    a, b = spawn_scheduler("a"), spawn_scheduler("b")
    await poll(lambda: all_owned_evenly(db, 2), timeout_s=30, what="two schedulers to split the shards")
    a_owner = a.owner()
    await poll(lambda: _after(first + timedelta(seconds=4)), timeout_s=30, what="dispatching to be under way")
    a.signal(signal.SIGSTOP)
    stopped_at = time.monotonic()

    async def b_owns_everything() -> bool:
        return set((await owners(db)).values()) == {b.owner()}

    await poll(b_owns_everything, timeout_s=20, what="b to take over a's shards")
    # Stay stopped a little longer, so a wakes with a heap full of overdue entries.
    await poll(lambda: _true(time.monotonic() - stopped_at > TTL_S + 2), timeout_s=10)
    a.signal(signal.SIGCONT)

    def fenced_logged() -> bool:
        return any(r.get("msg") == "dispatch batch refused by the shard fence" for r in a.logs())

    await poll(lambda: _true(fenced_logged()), timeout_s=15, what="a's stale batch to be refused by the fence")
    await poll(
        lambda: _equals(dispatched(db, once), len(once)),
        timeout_s=60,
        interval_s=0.5,
        what="every job to be dispatched",
    )
    await assert_one_offs_dispatched_exactly_once(db, once)
    # a came back: the shards are split again.
    await poll(lambda: all_owned_evenly(db, 2), timeout_s=20, what="a to rejoin")
    assert a_owner in set((await owners(db)).values())
    assert a.terminate() == 0 and b.terminate() == 0


async def test_a_second_scheduler_takes_half_the_shards_without_missing_anything(db: Database, spawn_scheduler) -> None:
    tenants = await new_tenants(db, 3)
    first = datetime.now(timezone.utc) + timedelta(seconds=5)
    once = await seed_spread(db, tenants, 4000, first, 20)
    # Cron jobs due at the minute boundary just passed: dispatched at once, their next
    # occurrences then move between the schedulers with the shards.
    crons = await seed_spread(db, tenants, 100, first, 0, cron="* * * * *", cron_minutes_ahead=0)
    # These two dispatch at SERIALIZABLE (the database default) instead of READ COMMITTED: the
    # same guarantees must hold while batches collide and are re-run.
    a = spawn_scheduler("a", KAIROS_DISPATCH_ISOLATION="")
    await poll(lambda: all_owned_evenly(db, 1), timeout_s=30, what="one scheduler to own every shard")
    await poll(lambda: _after(first + timedelta(seconds=6)), timeout_s=30, what="dispatching to be under way")
    b = spawn_scheduler("b", KAIROS_DISPATCH_ISOLATION="")
    split = await poll(lambda: all_owned_evenly(db, 2), timeout_s=30, what="an even split")
    assert sorted(set(split.values())) == sorted({a.owner(), b.owner()})
    await poll(
        lambda: _equals(dispatched(db, once), len(once)),
        timeout_s=60,
        interval_s=0.5,
        what="every job to be dispatched",
    )
    await assert_one_offs_dispatched_exactly_once(db, once)
    # Moving shards may delay an occurrence by a loader period or two, never by more.
    [(worst,)] = await query(
        db,
        "SELECT max(extract(epoch FROM dispatched_at - ready_at)) FROM executions WHERE job_id = ANY(:ids)",
        ids=once,
    )
    assert worst < 5.0, worst
    await poll(lambda: _equals(dispatched(db, crons), len(crons)), timeout_s=20, what="the cron jobs")
    await assert_cron_chains_unbroken(db, crons)
    assert a.terminate() == 0 and b.terminate() == 0


async def _after(at: datetime) -> bool:
    return datetime.now(timezone.utc) >= at


async def _equals(awaitable, expected) -> bool:
    return await awaitable == expected


async def _true(value: bool) -> bool:
    return value
