"""BufferStarter: starts the occurrence a buffer_one job keeps waiting, once its previous execution settled.

Overlap ``buffer_one`` (Temporal's BUFFER_ONE): an occurrence due while the job's previous execution is
unfinished does not become an execution; dispatch writes its nominal time on the job row
(``jobs.buffered_at``), and one more due meanwhile is recorded as skipped (reason ``overlap``). This duty
finds, through the partial index on that column, the jobs whose executions are all settled (succeeded,
dead-lettered, cancelled) and turns the waiting occurrence into a ready execution, ready at once
(DispatchStartBuffered).

Why a duty rather than the settle itself: a completion is one autocommit statement on the executor's
hot path (app.store.db ``Database.statement``), shared by every job; promoting there would cost every
completion a transaction and a second statement to serve the few buffer_one jobs. The lease and the
ready queue never see a waiting occurrence either: it is not an execution until it starts. The price is
latency: a buffered occurrence starts within ``interval_s`` of the settle. The statement is a guarded
update over rows it locks (SKIP LOCKED), so every scheduler process may run it at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from app import observability
from app.duties import run_every
from app.store import Database

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


class BufferStarter:
    def __init__(self, db: Database, config: BufferStarterConfig = BufferStarterConfig()) -> None:
        self.db = db
        self.config = config

    async def run_once(self) -> BufferResult:
        started = await self.db.transaction(
            lambda tx: tx.dispatch.start_buffered(self.config.batch), isolation="READ COMMITTED"
        )
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
