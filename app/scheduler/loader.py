"""DueLoader: read the due_index rows of owned shards into the heap.

Two scans, both range scans over each shard's (shard_id, due_minute, next_run_at, job_id) and
bounded per tick:
- the window scan, every ``window_interval_s`` and at once for newly acquired shards: every row
  up to the end of the next minute, overdue backlog first, at most ``max_rows_per_tick`` per tick
  (a backlog after downtime is read across several ticks instead of in one huge query). Each page
  takes every shard's next rows after that shard's own cursor (``page_rows`` shared among the
  shards still being read), so a page is a short range per shard and costs what it returns, not
  the whole backlog, and every shard's earliest rows come first: a scheduler that takes 256
  shards holding millions of overdue rows dispatches the earliest within a page.
- the near scan, every tick: the latest rows due before now + ``near_s`` (newest first, at most
  ``near_limit``, from each shard's latest ``near_shard_share`` times its even share). It picks up
  jobs submitted for "in a second" within one loader period of their commit, with no
  LISTEN/NOTIFY; newest first, so a herd's older rows, which are in the heap already, neither hide
  them nor get re-read every tick.
The heap ignores rows it already holds and rows of shards this process no longer holds.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from app.config import Settings
from app.duties import run_every
from app.scheduler.heap import DueEntry, DueHeap
from app.scheduler.leases import Ownership
from app.store import Database, Store
from app.store import dispatch as dispatch_store
from app.store.dispatch import DueCursor

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]

# Rows added to the heap between two turns of the event loop (about 10 ms of work).
ADD_CHUNK = 1_000


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)


@dataclass(frozen=True)
class LoaderConfig:
    interval_s: float = 1.0
    near_s: float = 5.0
    near_limit: int = 2_000
    window_interval_s: float = 10.0
    page_rows: int = 10_000
    max_rows_per_tick: int = 100_000
    # The near scan reads at most this many times a shard's even share of near_limit from each shard.
    near_shard_share: int = 4

    @classmethod
    def from_settings(cls, settings: Settings) -> LoaderConfig:
        interval_s = settings.loader_interval_s
        return cls(
            interval_s=interval_s,
            near_s=settings.loader_near_s if settings.loader_near_s is not None else max(5.0, 3 * interval_s),
            window_interval_s=settings.loader_window_interval_s,
            max_rows_per_tick=settings.loader_max_rows_per_tick,
        )


@dataclass
class _WindowScan:
    """A window scan in progress: its shards still being read, its end, and how far each has got."""

    shards: set[int]
    until: datetime
    after: dict[int, DueCursor] = field(default_factory=dict)


@dataclass
class LoadResult:
    read: int = 0
    added: int = 0
    window_done: bool = True


class DueLoader:
    def __init__(
        self,
        db: Database,
        ownership: Ownership,
        heap: DueHeap,
        config: LoaderConfig = LoaderConfig(),
        clock: Clock | None = None,
        wake_dispatcher: asyncio.Event | None = None,
    ) -> None:
        self.db = db
        self.ownership = ownership
        self.heap = heap
        self.config = config
        self.clock = clock or _utcnow
        self.wake_dispatcher = wake_dispatcher
        self.wake = asyncio.Event()
        self._gained: set[int] = set()
        self._scan: _WindowScan | None = None
        self._last_window = float("-inf")
        ownership.on_change(self._on_ownership_change)

    def _on_ownership_change(self, gained: set[int], lost: set[int]) -> None:
        if lost:
            dropped = self.heap.drop_shards(lost)
            if dropped:
                log.info("dropped entries of lost shards", extra={"shards": len(lost), "entries": dropped})
        if gained:
            self._gained |= gained
            self.wake.set()

    def _to_entries(self, rows: list[dispatch_store.DueRow]) -> list[DueEntry]:
        held = self.ownership.held
        out = []
        for r in rows:
            revision = held.get(r.shard_id)
            if revision is None:
                continue  # lost while we read
            out.append(
                DueEntry(
                    r.shard_id,
                    revision,
                    r.due_minute,
                    r.next_run_at,
                    r.job_id,
                    r.tenant_id,
                    r.nominal_at,
                    r.weight,
                    r.max_dispatch_per_s,
                )
            )
        return out

    async def _read(
        self,
        shards: list[int],
        until: datetime,
        after: dict[int, DueCursor] | None,
        limit: int,
        per_shard: int,
        *,
        latest: bool = False,
    ) -> list[dispatch_store.DueRow]:
        async def read(tx: Store) -> list[dispatch_store.DueRow]:
            if latest:
                return await tx.dispatch.load_latest_due(shards, until, limit, per_shard)
            return await tx.dispatch.load_due(shards, until, after, limit, per_shard)

        # A pure hint read: READ COMMITTED keeps it from adding serialization conflicts to dispatch.
        return await self.db.transaction(read, isolation="READ COMMITTED")

    async def _add(self, rows: list[dispatch_store.DueRow], result: LoadResult) -> None:
        """Add rows to the heap ``ADD_CHUNK`` at a time, letting the dispatcher run between chunks."""
        result.read += len(rows)
        for start in range(0, len(rows), ADD_CHUNK):
            if start:
                await asyncio.sleep(0)  # a page's rows take a while: dispatch batches go on meanwhile
            added = self.heap.add(self._to_entries(rows[start : start + ADD_CHUNK]))
            result.added += added
            if added and self.wake_dispatcher is not None:
                self.wake_dispatcher.set()

    async def run_once(self) -> LoadResult:
        result = LoadResult()
        held = sorted(self.ownership.held)
        if not held:
            self._scan = None
            self._gained.clear()
            return result
        now = self.clock()
        cfg = self.config
        # Start a window scan when one is due (all shards) or shards were gained (just those).
        if self._scan is None:
            # The end of the next minute: the window is "this minute and the next" (plus backlog).
            window_end = now.replace(second=0, microsecond=0) + timedelta(minutes=2, microseconds=-1)
            if time.monotonic() - self._last_window >= cfg.window_interval_s:
                self._scan = _WindowScan(set(held), window_end)
                self._last_window = time.monotonic()
                self._gained.clear()
            elif self._gained:
                self._scan = _WindowScan(self._gained & set(held), window_end)
                self._gained = set()
        budget = cfg.max_rows_per_tick
        while self._scan is not None and budget > 0:
            scan = self._scan
            scan.shards &= set(self.ownership.held)
            shards = sorted(scan.shards)
            if not shards:
                self._scan = None
                break
            page = min(cfg.page_rows, budget)
            per_shard = -(-page // len(shards))
            rows = await self._read(shards, scan.until, scan.after, page, per_shard)
            await self._add(rows, result)
            budget -= len(rows)
            read: dict[int, int] = {}
            for r in rows:  # earliest first: each shard's last row is where it has got to
                scan.after[r.shard_id] = (r.due_minute, r.next_run_at, r.job_id)
                read[r.shard_id] = read.get(r.shard_id, 0) + 1
            if len(rows) < page:
                # Nothing was cut by the page's limit: a shard that gave fewer than its share is read out.
                scan.shards = {s for s in shards if read.get(s, 0) >= per_shard}
                if not scan.shards:
                    self._scan = None
        result.window_done = self._scan is None
        # The near scan: what is due soon, whatever the window scan has reached.
        held = sorted(self.ownership.held)
        near_per_shard = min(cfg.near_limit, -(-cfg.near_shard_share * cfg.near_limit // len(held)))
        near = await self._read(
            held, now + timedelta(seconds=cfg.near_s), None, cfg.near_limit, near_per_shard, latest=True
        )
        await self._add(near, result)
        return result

    async def run(self, stop: asyncio.Event) -> None:
        # A bounded tick that did not reach the end of the window: the rest of the backlog follows at once.
        await run_every(
            "due-loader",
            self.config.interval_s,
            stop,
            self.run_once,
            again=lambda result: not result.window_done,
            wakes=(self.wake,),
        )
