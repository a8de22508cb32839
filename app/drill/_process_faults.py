"""The process faults: ``scheduler-kill`` (one of two schedulers SIGKILLed while a herd is dispatched)
and ``worker-stall`` (an SDK worker stopped while it holds leases, then resumed)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

from app.drill._flow import Flow, flow_lines, outcome_lines
from app.drill._harness import (
    SHARDS,
    DrillOptions,
    Harness,
    api_url,
    live_shards,
    owned,
    run_drill,
    safely,
    single_region,
    until,
)
from app.drill.fleet import Proc
from app.drill.measure import Report, read_runs
from app.drill.reads import LiveShards, drill
from app.drill.traffic import Submitter
from app.store import Database


def _owner_pid(owner: str) -> int | None:
    """``hostname:pid:random`` (app.scheduler.service.new_owner_id) -> pid."""
    parts = owner.rsplit(":", 2)
    return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


async def scheduler_kill(options: DrillOptions) -> Report:
    return await run_drill("scheduler-kill", options, _scheduler_kill)


async def _scheduler_kill(h: Harness, report: Report) -> None:
    o = h.options
    assert h.fleet is not None
    deadline = time.monotonic() + o.timeout_s
    site = await single_region(h, schedulers=2, workers=1, work_s=0.0, worker_lease_s=o.worker_lease_s)
    db, scheds = site.db, site.schedulers

    async def split() -> list[LiveShards] | None:
        shards = await live_shards(db)
        return shards if shards and len(shards) == 2 and owned(shards) == SHARDS else None

    before = await until(split, timeout_s=60, what="both schedulers to hold shards")
    victim = scheds[0]
    victim_owner = next(s for s in before if _owner_pid(s.owner) == victim.pid)
    report.add(
        "processes",
        "PostgreSQL, api, 2 schedulers, executor, SDK worker "
        f"(shards: {', '.join(f'{s.owner} {s.shards}' for s in before)})",
    )
    async with Submitter([api_url(site.api)], site.key) as submitter:
        flow = Flow(submitter, o, site.workers)
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault
        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due - 0.5 - time.time()))  # killed while the herd is being dispatched
        fault_at = time.time()
        h.fleet.kill(victim)
        await until(
            lambda: _all_owned_by_others(db, victim_owner.owner),
            timeout_s=max(1.0, deadline - time.monotonic()),
            what="the survivor to own every shard",
        )
        takeover_s = time.time() - fault_at
        await asyncio.sleep(o.observe_s)
        result, _ = await flow.finish(fault_at, deadline, db)
    flow_lines(report, flow, result)
    report.add(
        "fault",
        f"{victim.name} ({victim_owner.owner}, {victim_owner.shards} shards) killed with SIGKILL "
        f"at {h.since_start(fault_at)}, {herd_due - fault_at:.1f} s before the herd was due",
    )
    report.add(
        "takeover time",
        f"{takeover_s:.1f} s ({scheds[1].name} owns {SHARDS}/{SHARDS} shards; lease TTL {o.lease_ttl_s:g} s)",
    )
    await outcome_lines(report, db, result, "started twice; same idempotency key")
    report.add("drill time", f"{time.time() - h.started:.0f} s")
    report.ok = result.lost == 0


async def _all_owned_by_others(db: Database, owner: str) -> bool:
    return owned(await live_shards(db), owner_ok=lambda o: o != owner) == SHARDS


# -- worker stall --------------------------------------------------------------------------------

WORK_S = 0.8  # each run of the stall drill works this long, so the stalled worker holds runs in flight
STALL_LEASE_S = 3.0
STALL_CONCURRENCY = 32  # runs each of its workers holds at once


async def worker_stall(options: DrillOptions) -> Report:
    return await run_drill("worker-stall", options, _worker_stall)


def _lease_lost_lines(proc: Proc, execution_ids: set[str]) -> tuple[int, int]:
    """Lines of ``proc``'s log, about one of ``execution_ids``: (outcomes discarded, results dropped)."""
    try:
        lines = proc.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return 0, 0
    counts = {"lease lost; outcome discarded": 0, "lease lost; result dropped": 0}
    for line in lines:
        if '"lease lost; ' in line:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if entry.get("msg") in counts and entry.get("execution_id") in execution_ids:
                    counts[entry["msg"]] += 1
    return counts["lease lost; outcome discarded"], counts["lease lost; result dropped"]


async def _worker_stall(h: Harness, report: Report) -> None:
    o = h.options
    assert h.fleet is not None
    deadline = time.monotonic() + o.timeout_s
    site = await single_region(
        h, schedulers=1, workers=2, work_s=WORK_S, worker_lease_s=STALL_LEASE_S, concurrency=STALL_CONCURRENCY
    )
    db, tenant_id = site.db, site.tenant_id
    stalled, other = site.workers
    report.add(
        "processes",
        f"PostgreSQL, api, scheduler, executor, 2 SDK workers ({STALL_CONCURRENCY} runs at once "
        f"each, every run works {WORK_S:g} s; worker lease {STALL_LEASE_S:g} s, renewed every third)",
    )
    async with Submitter([api_url(site.api)], site.key) as submitter:
        flow = Flow(submitter, o, site.workers)
        await flow.start()
        await asyncio.sleep(o.warmup_s)  # traffic before the fault

        async def holding() -> list[Any] | None:
            return await safely(db, lambda tx: drill(tx).leased_by(tenant_id, stalled.name)) or None

        herd_due = await flow.herd()
        await asyncio.sleep(max(0.0, herd_due + 0.2 - time.time()))
        await until(holding, timeout_s=30, what=f"{stalled.name} to hold leases")
        h.fleet.pause(stalled)
        fault_at = time.time()
        held = await db.transaction(lambda tx: drill(tx).leased_by(tenant_id, stalled.name))
        keys = {(x.job_id, round(x.scheduled_for.timestamp(), 3)) for x in held}
        # Only what it held counts: a lease of the stalled worker's still on its way at the pause can
        # reach it after SIGCONT, and that one's lost lease is not a late outcome of these.
        held_ids = {str(x.execution_id) for x in held}

        async def retried() -> float | None:
            again = [
                r.started
                for r in read_runs([other.runs_path] if other.runs_path else [])
                if r.key in keys and r.started >= fault_at
            ]
            done = {
                r.key
                for r in read_runs([other.runs_path] if other.runs_path else [])
                if r.key in keys and r.started >= fault_at
            }
            return max(again) if keys and done == keys else None

        retried_at = await until(
            retried,
            timeout_s=max(1.0, deadline - time.monotonic()),
            what=f"{other.name} to run what {stalled.name} held",
        )
        takeover_s = retried_at - fault_at
        h.fleet.resume(stalled)
        resumed_at = time.time()

        async def all_fenced() -> bool:
            return sum(_lease_lost_lines(stalled, held_ids)) >= len(held)

        with contextlib.suppress(TimeoutError):
            await until(all_fenced, timeout_s=10, what="the late outcomes")
        await asyncio.sleep(o.observe_s)
        result, _ = await flow.finish(fault_at, deadline, db)
        outcomes = await db.transaction(lambda tx: drill(tx).attempt_outcomes(tenant_id))
    discarded = sum(c.attempts for c in outcomes if c.worker_id == stalled.name and c.outcome == "discarded")
    expired = sum(c.attempts for c in outcomes if c.worker_id == stalled.name and c.outcome == "expired")
    flow_lines(report, flow, result)
    report.add(
        "fault",
        f"{stalled.name} stopped (SIGSTOP) at {h.since_start(fault_at)} holding {len(held)} leased "
        f"executions; resumed (SIGCONT) {resumed_at - fault_at:.1f} s later",
    )
    report.add(
        "takeover time",
        f"{takeover_s:.1f} s (its {len(held)} executions' leases expired, the reaper "
        f"returned them to the queue and {other.name} ran them)",
    )
    refused, dropped = _lease_lost_lines(stalled, held_ids)
    report.add(
        "late outcomes refused",
        f"{refused + dropped} of {len(held)} (LEASE_LOST: {refused} outcomes "
        f"refused and kept as discarded attempts, {dropped} heartbeats refused before the handler "
        f"finished; {stalled.name}'s attempts in the database: {discarded} discarded, {expired} expired)",
    )
    await outcome_lines(
        report, db, result, f"the stalled worker's runs, run again by {other.name}; same idempotency key"
    )
    report.add("drill time", f"{time.time() - h.started:.0f} s")
    report.ok = result.lost == 0
