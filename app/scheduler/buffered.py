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
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from app import observability
from app.domain.states import JobState
from app.duties import run_every
from app.observability import tracing
from app.store import Database, Store
from app.store.dispatch import Buffered

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


def _trace(b: Buffered) -> str | None:
    """The occurrence's trace, as dispatch starts one for a recurring job's occurrence (linked to the submit)."""
    if b.job_state == JobState.CANCELLED:
        return None  # dropped, never run
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


class BufferStarter:
    def __init__(self, db: Database, config: BufferStarterConfig = BufferStarterConfig()) -> None:
        self.db = db
        self.config = config

    async def run_once(self) -> BufferResult:
        async def work(tx: Store) -> list[tuple[UUID, datetime]]:
            locked = await tx.dispatch.lock_buffered(self.config.batch)
            return await tx.dispatch.start_buffered(locked, [_trace(b) for b in locked])

        started = await self.db.transaction(work, isolation="READ COMMITTED")
        if started:
            observability.dispatched.add(len(started))  # ready executions made, as dispatch counts its own
            log.info("buffered occurrences started", extra={"started": len(started)})
        return BufferResult(len(started))

    async def run(self, stop: asyncio.Event) -> None:
        await run_every(
            "buffer-starter",
            self.config.interval_s,
            stop,
            self.run_once,
            again=lambda result: result.started >= self.config.batch,
        )
