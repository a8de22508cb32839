"""`kairos scheduler`: the leaser, loader and dispatcher as named, supervised asyncio tasks.

Faults it rides out by itself (docs/operations.md): a database that is down or restarting makes each
duty's pass fail and the next one try again (the shards are dropped once their leases cannot have
been renewed, and taken again when the database answers); a database that does not answer is cut
off at the lease deadline (``ShardLeaser.renew_in_time``); and a process that holds shards but
cannot dispatch them (``DispatchProgress``) hands them back for a while, so another scheduler can.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone

from app.config import Settings
from app.duties import supervise
from app.observability.probes import LIVENESS
from app.scheduler.buffered import BufferStarter
from app.scheduler.dispatcher import Dispatcher, DispatcherConfig
from app.scheduler.heap import DueHeap
from app.scheduler.leases import LeaserConfig, Ownership, ShardLeaser
from app.scheduler.loader import DueLoader, LoaderConfig
from app.scheduler.partitions import HistoryPartitioner, PartitionerConfig, objects_for
from app.scheduler.removal import JobRemover
from app.scheduler.statistics import StatisticsKeeper
from app.store import Database

log = logging.getLogger(__name__)

# Shutdown: how long in-flight batches and the loader get before they are cancelled.
SHUTDOWN_GRACE_S = 5.0
# The leaser's silence that makes /healthz fail: its passes are bounded by the lease TTL, plus the few
# seconds a cancelled statement may take to let go of its connection.
LEASER_SILENCE_SLACK_S = 15.0
# The shortest stall (no dispatch batch finished while work is overdue) that makes a scheduler stand down.
STALL_MIN_S = 5.0


class DispatchProgress:
    """Whether this process gets anywhere with the shards it holds.

    Stalled: work has been due for ``stall_s`` (the heap's head is that far past) while no dispatch
    batch has finished in as long; its connections hang or its statements keep
    timing out, though the leaser may still renew. Holding the shards then only keeps them from a
    scheduler that could dispatch them, so ``may_hold`` says no for ``sit_out_s`` (doubling while
    it keeps stalling, up to ``sit_out_max_s``), the leaser hands them back, and afterwards this
    process joins again and tries.
    """

    def __init__(
        self,
        dispatcher: Dispatcher,
        heap: DueHeap,
        *,
        stall_s: float,
        sit_out_s: float,
        sit_out_max_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
    ) -> None:
        self.dispatcher = dispatcher
        self.heap = heap
        self.stall_s = stall_s
        self.sit_out_s = sit_out_s
        self.sit_out_max_s = sit_out_max_s
        self.clock = clock
        self.wall = wall
        self._seen = self._finished()
        self._progress_at = clock()
        self._out_until = 0.0
        self._next_sit_out_s = sit_out_s
        self.stand_downs = 0

    def _finished(self) -> tuple[int, ...]:
        t = self.dispatcher.totals  # moves only when a batch's transaction finished
        return (t.claimed, t.fenced, t.vanished, t.ready, t.skipped)

    def stalled(self) -> bool:
        now = self.clock()
        finished = self._finished()
        if finished != self._seen:
            self._seen, self._progress_at = finished, now
            self._next_sit_out_s = self.sit_out_s
        if now - self._progress_at < self.stall_s:
            return False
        # The heap's head: work not yet handed to a batch (a failed batch's entries come back to it).
        waiting = self.heap.next_wake_ts()
        return waiting is not None and self.wall().timestamp() - waiting >= self.stall_s

    def may_hold(self) -> bool:
        now = self.clock()
        if now < self._out_until:
            return False
        if not self.stalled():
            return True
        self.stand_downs += 1
        log.warning(
            "no dispatch batch finished while work is overdue; standing down",
            extra={"stalled_s": round(now - self._progress_at, 1), "sit_out_s": self._next_sit_out_s},
        )
        self._out_until = now + self._next_sit_out_s
        self._next_sit_out_s = min(self.sit_out_max_s, self._next_sit_out_s * 2)
        self._progress_at = self._out_until  # joining again starts a fresh stall clock
        return False


def new_owner_id() -> str:
    """hostname:pid:random: unique per process, readable in shard_leases."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


class Scheduler:
    """One scheduler process's duties, wired around one ownership map and one heap."""

    def __init__(self, db: Database, settings: Settings, owner: str | None = None) -> None:
        self.owner = owner or new_owner_id()
        self.ownership = Ownership()
        self.heap = DueHeap()
        self.dispatcher = Dispatcher(db, self.owner, self.heap, DispatcherConfig.from_settings(settings))
        self.leaser = ShardLeaser(db, self.owner, self.ownership, LeaserConfig.from_settings(settings))
        self.loader = DueLoader(
            db, self.ownership, self.heap, LoaderConfig.from_settings(settings), wake_dispatcher=self.dispatcher.wake
        )
        self.statistics = StatisticsKeeper(db)
        self.buffer = BufferStarter(db)
        self.partitions = HistoryPartitioner(db, objects_for(settings), PartitionerConfig.from_settings(settings))
        self.remover = JobRemover(db, self.partitions.objects)
        ttl_s = self.leaser.config.ttl_s
        # Twice the TTL: a leaser tick that hangs costs the shards after one TTL; a dispatcher that hangs
        # while the leaser still renews (it found a fresh connection) costs them after two.
        self.progress = DispatchProgress(
            self.dispatcher, self.heap, stall_s=max(2 * ttl_s, STALL_MIN_S), sit_out_s=ttl_s
        )
        self.leaser_silence_s = 3 * ttl_s + LEASER_SILENCE_SLACK_S

    def leaser_silent(self) -> str | None:
        """What /healthz says about the leaser: None while its passes keep coming."""
        silent_s = time.monotonic() - self.leaser.last_pass_at
        if silent_s <= self.leaser_silence_s:
            return None
        return f"the shard leaser has not finished a pass for {silent_s:.0f} s"

    async def run(self, stop: asyncio.Event) -> None:
        config = self.leaser.config
        log.info(
            "scheduler starting",
            extra={"owner": self.owner, "region": config.region or None, "standby": config.standby},
        )
        duties_stop = asyncio.Event()
        duties: list[tuple[str, Callable[[asyncio.Event], Awaitable[None]]]] = [
            ("leaser", lambda s: self.leaser.run(s, may_hold=self.progress.may_hold)),
            ("loader", self.loader.run),
            ("dispatcher", self.dispatcher.run),
            ("statistics", self.statistics.run),
            ("partitions", self.partitions.run),
            ("job-remover", self.remover.run),
            ("buffer", self.buffer.run),
        ]
        tasks = [
            asyncio.create_task(
                supervise(name, functools.partial(duty, duties_stop), duties_stop), name=f"scheduler.{name}"
            )
            for name, duty in duties
        ]
        LIVENESS.watch("scheduler.leaser", self.leaser_silent)
        try:
            await stop.wait()
        finally:
            LIVENESS.forget("scheduler.leaser")
            duties_stop.set()
            _, pending = await asyncio.wait(tasks, timeout=SHUTDOWN_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=1.0)
            try:
                await asyncio.wait_for(self.leaser.release_all(), timeout=SHUTDOWN_GRACE_S)
            except Exception:
                log.exception("could not hand shards back; they expire after the lease TTL")
            log.info("scheduler stopped", extra={"owner": self.owner, "dispatched": self.dispatcher.totals.ready})


async def serve(settings: Settings, db: Database, stop: asyncio.Event) -> None:
    """Run the scheduler until ``stop`` is set, then hand its shards back and return."""
    await Scheduler(db, settings).run(stop)
