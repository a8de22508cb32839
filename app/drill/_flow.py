"""The work of one drill, from submit to drain (``Flow``), and the report's lines on how it went."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from uuid import UUID

from app.domain.states import ExecutionState
from app.drill._harness import (
    HERD_LEAD_S,
    POLL_S,
    POOL,
    QUIET_S,
    REPORT_MARGIN_S,
    SETTLE_S,
    STEADY_LEAD_S,
    DrillOptions,
    safely,
)
from app.drill.fleet import Proc
from app.drill.measure import Report, Run, Tally, occurrence_text, read_runs, tally
from app.drill.reads import drill
from app.drill.traffic import Submitter, one_off, recurring
from app.store import Database


@dataclass
class Flow:
    """The work of one drill, from submit to drain."""

    submitter: Submitter
    options: DrillOptions
    workers: list[Proc]
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    steady_task: asyncio.Task[None] | None = None
    herd_due: float = 0.0

    async def start(self) -> None:
        o = self.options
        await asyncio.gather(
            *(
                self.submitter.one(recurring(f"recurring-{i}", POOL, o.every_s), "recurring", every_s=float(o.every_s))
                for i in range(o.recurring)
            )
        )
        self.steady_task = asyncio.create_task(
            self.submitter.steady(self.stop, pool=POOL, rate_per_s=o.steady_per_s, lead_s=STEADY_LEAD_S),
            name="drill.steady",
        )

    async def herd(self) -> float:
        """Send the herd, due HERD_LEAD_S from now; returns its due instant."""
        self.herd_due = time.time() + HERD_LEAD_S
        await self.submitter.many([one_off(f"herd-{i}", POOL, self.herd_due) for i in range(self.options.herd)], "herd")
        return self.herd_due

    def runs(self) -> list[Run]:
        return read_runs(p.runs_path for p in self.workers if p.runs_path is not None)

    async def succeeded(self, db: Database) -> set[tuple[UUID, float]] | None:
        """The owed occurrences whose execution succeeded, as ``db`` has them (None: it could not be read)."""
        ids = sorted({o.job_id for o in self.submitter.owed})
        executions = await safely(db, lambda tx: drill(tx).executions_of(ids))
        if executions is None:
            return None
        return {(job, round(at.timestamp(), 3)) for job, at, state in executions if state == ExecutionState.SUCCEEDED}

    async def finish(self, fault_at: float, deadline: float, db: Database) -> tuple[Tally, float]:
        """Stop submitting, wait for what is owed to succeed (bounded), and count; returns (tally, until).

        An occurrence counts once ``db`` (the surviving database) has its execution succeeded: started
        is not enough, a run whose completion was lost (its worker killed, its database failed over)
        still owes its outcome."""
        self.stop.set()
        if self.steady_task is not None:
            await self.steady_task
        until = time.time() + STEADY_LEAD_S + 0.001  # every steady job acknowledged is due by then
        last_count, last_change = -1, time.monotonic()
        done: set[tuple[UUID, float]] = set()
        while True:
            done = await self.succeeded(db) or done  # a failed read keeps the last one
            result = tally(self.submitter.owed, self.runs(), fault_at=fault_at, until=until, succeeded=done)
            if result.lost == 0:
                return result, until
            now = time.monotonic()
            if result.ran != last_count:
                last_count, last_change = result.ran, now
            settled = time.time() > until + SETTLE_S and now - last_change > QUIET_S
            if settled or now > deadline - REPORT_MARGIN_S:
                return result, until
            await asyncio.sleep(POLL_S)


def flow_lines(report: Report, flow: Flow, result: Tally) -> None:
    kinds: dict[str, int] = {}
    for o in flow.submitter.owed:
        kinds[o.kind] = kinds.get(o.kind, 0) + 1
    report.add(
        "acknowledged",
        f"{len(flow.submitter.owed)} jobs owing {result.owed} occurrences (herd "
        f"{kinds.get('herd', 0)}, steady {kinds.get('steady', 0)}, recurring {kinds.get('recurring', 0)} "
        f"every {flow.options.every_s} s); submits not acknowledged: {flow.submitter.refused}",
    )


async def where_lost(db: Database, result: Tally) -> str:
    """Where the database has the occurrences that never succeeded: still due, dispatched (and in which
    state), or nowhere."""
    ids = sorted({job for job, _ in result.lost_keys})
    due = await safely(db, lambda tx: drill(tx).due_of(ids))
    executions = await safely(db, lambda tx: drill(tx).executions_of(ids))
    if due is None or executions is None:
        return "the database could not be read"
    states = {(job, round(at.timestamp(), 3)): state for job, at, state in executions}
    waiting = sum(1 for job, at in result.lost_keys if job in due and round(due[job].timestamp(), 3) == at)
    dispatched: dict[str, int] = {}
    for key in result.lost_keys:
        if key in states:
            dispatched[states[key]] = dispatched.get(states[key], 0) + 1
    nowhere = result.lost - waiting - sum(dispatched.values())
    shown = ", ".join(f"{n} {state}" for state, n in sorted(dispatched.items())) or "none"
    return (
        f"in the database: {waiting} still waiting in due_index, dispatched: {shown}, {nowhere} with no trace; "
        f"first: {', '.join(occurrence_text(j, at) for j, at in result.lost_examples)}"
    )


async def outcome_lines(report: Report, db: Database, result: Tally, duplicated_reason: str) -> None:
    report.lost = result.lost
    report.add("lost", str(result.lost) + (f" ({await where_lost(db, result)})" if result.lost else ""))
    report.add("duplicated", f"{result.duplicated}" + (f" ({duplicated_reason})" if result.duplicated else ""))
    back = "not by the end of the drill" if result.lag_back_s is None else f"{result.lag_back_s:.1f} s after the fault"
    report.add(
        "lag back under 2 s",
        f"{back} (max start lag {result.max_lag_s:.1f} s; {result.late_after_fault} "
        "occurrences started 2 s late or more after the fault)",
    )
    report.add(
        "ran",
        f"{result.ran} of {result.owed} owed occurrences succeeded ({result.started} started; "
        f"{result.started_not_succeeded} started but never succeeded)",
    )
