"""`kairos scheduler`: the leaser, loader and dispatcher as named, supervised asyncio tasks."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket

from app.config import Settings
from app.duties import supervise
from app.scheduler.dispatcher import Dispatcher, DispatcherConfig
from app.scheduler.heap import DueHeap
from app.scheduler.leases import LeaserConfig, Ownership, ShardLeaser
from app.scheduler.loader import DueLoader, LoaderConfig
from app.scheduler.statistics import StatisticsKeeper
from app.store import Database

log = logging.getLogger(__name__)

# Shutdown: how long in-flight batches and the loader get before they are cancelled.
SHUTDOWN_GRACE_S = 5.0


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
        self.loader = DueLoader(db, self.ownership, self.heap, LoaderConfig.from_settings(settings),
                                wake_dispatcher=self.dispatcher.wake)
        self.statistics = StatisticsKeeper(db)

    async def run(self, stop: asyncio.Event) -> None:
        config = self.leaser.config
        log.info("scheduler starting", extra={"owner": self.owner, "region": config.region or None,
                                              "standby": config.standby})
        duties_stop = asyncio.Event()
        tasks = [
            asyncio.create_task(supervise(name, lambda duty=duty: duty(duties_stop), duties_stop),
                                name=f"scheduler.{name}")
            for name, duty in (("leaser", self.leaser.run), ("loader", self.loader.run),
                               ("dispatcher", self.dispatcher.run), ("statistics", self.statistics.run))
        ]
        try:
            await stop.wait()
        finally:
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
            log.info("scheduler stopped",
                     extra={"owner": self.owner, "dispatched": self.dispatcher.totals.ready})


async def serve(settings: Settings, db: Database, stop: asyncio.Event) -> None:
    """Run the scheduler until ``stop`` is set, then hand its shards back and return."""
    await Scheduler(db, settings).run(stop)
