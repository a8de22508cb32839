"""BufferStarter: starts the occurrence a buffer_one job keeps waiting, once its previous execution settled.

Overlap ``buffer_one`` (Temporal's BUFFER_ONE): an occurrence due while the job's previous execution is
unfinished does not become an execution; dispatch writes its nominal time on the job row
(``jobs.buffered_at``), and one more due meanwhile is recorded as skipped (reason ``overlap``). This duty
finds, through the partial index on that column, the jobs whose executions are all settled (succeeded,
dead-lettered, cancelled) and turns the waiting occurrence into a ready execution, ready at once
(DispatchLockBuffered, then DispatchStartBuffered with the occurrence's trace).

Why a duty rather than the settle itself: a completion is one autocommit statement on the executor's
hot path (app.store.db ``Database.statement``), shared by every job; promoting there would cost every
completion a transaction and a second statement to serve the few buffer_one jobs. The lease and the
ready queue never see a waiting occurrence either: it is not an execution until it starts. The price is
latency: a buffered occurrence starts within ``interval_s`` of the settle. The jobs are locked
(SKIP LOCKED) and the clear is guarded on the time read, so every scheduler process may run it at once.

How the waiting occurrence meets the other rules (as Temporal's scheduler treats a buffered start):

* maxRuns: it counts when it starts, not when it is buffered (Temporal spends a remaining action at the
  start), and the start that reaches the limit completes the job. A schedule that ended (endAt) while it
  waits stays ``active``, with nothing further due, until it starts: it is still going to run.
* A pause (``:pause``, or pauseOnFailure's dead letter) drops it: recorded as skipped with reason
  ``paused``, like the occurrences that fall in the pause; a resume does not bring it back. The API's
  pause and resume drop it in their own transaction (app.api.jobs.service); this duty drops it after a
  pauseOnFailure pause, which the executor's Fail makes. A cancel drops it unrecorded (the job is gone).
* An update that changes the overlap policy decides it by the policy it has now (Temporal resolves a
  scheduled start's policy when it processes the buffer): ``allow`` starts it at once, ``forbid`` records
  it as skipped (reason ``overlap``) while the previous one still runs and starts it otherwise,
  ``replace`` cancels the previous one and starts it.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app import observability
from app.domain.states import ExecutionState, JobState
from app.duties import run_every
from app.observability import tracing
from app.store import Database, Store
from app.store.dispatch import Buffered, BufferedOutcome, Replacement

log = logging.getLogger(__name__)

BUFFER_INTERVAL_S_DEFAULT = 1.0
BUFFER_BATCH_DEFAULT = 500


@dataclass(frozen=True)
class BufferStarterConfig:
    interval_s: float = BUFFER_INTERVAL_S_DEFAULT
    # Jobs started per statement; a full batch goes round again at once.
    batch: int = BUFFER_BATCH_DEFAULT

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.batch < 1:
            raise ValueError("interval_s > 0 and batch >= 1 are required")


@dataclass(frozen=True)
class BufferResult:
    started: int
    settled: int = 0  # waiting occurrences cleared: started, recorded as skipped, or dropped with their job


def _trace(b: Buffered) -> str:
    """The occurrence's trace, as dispatch starts one for a recurring job's occurrence (linked to the submit)."""
    return tracing.occurrence(
        b.job_traceparent,
        one_off=False,
        attributes={
            "kairos.job_id": str(b.job_id),
            "kairos.tenant_id": str(b.tenant_id),
            "kairos.scheduled_for": b.buffered_at.isoformat(),
            "kairos.buffered": True,
        },
    )


def settle(b: Buffered) -> BufferedOutcome:
    """What becomes of a waiting occurrence, by its job's state and overlap policy now (pure)."""
    if b.job_state == JobState.CANCELLED:
        return BufferedOutcome(start=False)  # dropped with the job, never run
    if b.job_state == JobState.PAUSED:
        return BufferedOutcome(False, None, "paused", "the job was paused while this occurrence waited")
    if b.max_runs is not None and (b.run_count or 0) >= b.max_runs:
        return BufferedOutcome(start=False)  # the limit is spent (it cannot be passed)
    if b.in_flight and b.concurrency == "forbid":
        note = "the previous execution was still unfinished (the overlap policy became forbid while this one waited)"
        return BufferedOutcome(False, None, "overlap", note)
    return BufferedOutcome(True, _trace(b))


class BufferStarter:
    def __init__(self, db: Database, config: BufferStarterConfig = BufferStarterConfig()) -> None:
        self.db = db
        self.config = config

    async def run_once(self) -> BufferResult:
        async def work(tx: Store) -> tuple[int, list[tuple[UUID, datetime, str]]]:
            locked = await tx.dispatch.lock_buffered(self.config.batch)
            outcomes = [settle(b) for b in locked]
            replacing = [
                Replacement(b.job_id, b.buffered_at, f"replaced by {b.buffered_at.isoformat()}")
                for b, o in zip(locked, outcomes, strict=True)
                if o.start and b.in_flight and b.concurrency == "replace"
            ]
            await tx.dispatch.cancel_replaced(replacing)
            return len(locked), await tx.dispatch.start_buffered(locked, outcomes)

        settled, inserted = await self.db.transaction(work, isolation="READ COMMITTED")
        started = sum(1 for _, _, state in inserted if state == ExecutionState.READY)
        if started:
            observability.dispatched.add(started)  # ready executions made, as dispatch counts its own
        if settled:
            log.info("buffered occurrences settled", extra={"settled": settled, "started": started})
        return BufferResult(started, settled)

    async def run(self, stop: asyncio.Event) -> None:
        await run_every(
            "buffer-starter",
            self.config.interval_s,
            stop,
            self.run_once,
            again=lambda result: result.settled >= self.config.batch,
        )
