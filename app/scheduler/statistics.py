"""StatisticsKeeper: re-analyzes the hot tables as soon as a burst of writes made their statistics stale.

A herd is written in a burst just before its due time (submits into jobs and due_index, then
dispatch into executions and attempts). Until the planner's statistics see those rows, it plans
the lease and dispatch statements for the tables it last analyzed (an empty ready queue), and
those plans were 10-25x slower through a herd; autovacuum's own analyze came about a minute
later. This duty checks every ``interval_s`` whether a hot table changed by at least
``min_rows`` rows and ``fraction`` of its size since its last analyze, and its size moved by
``fraction`` from what the planner believes (a drain's updates leave it alone: the plans made
after the herd's inserts still fit), and then analyzes those tables (each on its own: ANALYZE
samples 300 x ``target`` rows of a table, a share of a core that the untouched tables need not pay),
each at most once per ``min_gap_s``: through a drain the lease and completion updates keep
executions "stale" every second, and re-analyzing it that often cost a fifth of PostgreSQL's time
in a 50,000-job herd while the plans did not change.
PostgreSQL only: on CockroachDB the duty does nothing (its automatic statistics cover this).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import math
import time
from dataclasses import dataclass

from app.duties import run_every
from app.store import Database, Store

log = logging.getLogger(__name__)

STATISTICS_INTERVAL_S_DEFAULT = 1.0
STATISTICS_MIN_ROWS_DEFAULT = 5_000
STATISTICS_FRACTION_DEFAULT = 0.2
STATISTICS_MIN_GAP_S_DEFAULT = 5.0
# The keeper's ANALYZE samples 300 x this many rows (the server default of 100: 30,000 rows). The hot
# statements filter on a few columns of few distinct values (state, queue, tenant) and range over
# times, which ten histogram buckets and ten common values describe. At 100, an ANALYZE of 50,000
# ready executions cost 100 ms of the backend's CPU (9.5 ms at 10), and one in the middle of a herd's
# drain 704 ms of its wall time; the plans did not change.
STATISTICS_TARGET_DEFAULT = 10


@dataclass(frozen=True)
class StatisticsKeeperConfig:
    interval_s: float = STATISTICS_INTERVAL_S_DEFAULT
    # A table is stale once this many rows changed since its last analyze ...
    min_rows: int = STATISTICS_MIN_ROWS_DEFAULT
    # ... and at least this fraction of its rows.
    fraction: float = STATISTICS_FRACTION_DEFAULT
    # ... and this keeper has not analyzed it in the last min_gap_s seconds.
    min_gap_s: float = STATISTICS_MIN_GAP_S_DEFAULT
    # The statistics target of the keeper's own ANALYZE (autovacuum's keeps the server's).
    target: int = STATISTICS_TARGET_DEFAULT

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.min_rows < 1 or self.fraction < 0 or self.min_gap_s < 0:
            raise ValueError("interval_s > 0, min_rows >= 1, fraction >= 0 and min_gap_s >= 0 are required")
        if not 1 <= self.target <= 10_000:
            raise ValueError("target must be between 1 and 10,000 (PostgreSQL's range for a statistics target)")


@dataclass(frozen=True)
class StatisticsResult:
    analyzed: tuple[str, ...]  # the stale tables analyzed (empty: none)


class StatisticsKeeper:
    def __init__(self, db: Database, config: StatisticsKeeperConfig = StatisticsKeeperConfig()) -> None:
        self.db = db
        self.config = config
        self._analyzed_at: dict[str, float] = {}  # table -> monotonic time of this keeper's last analyze

    @property
    def enabled(self) -> bool:
        return self.db.dialect == "postgresql"

    async def _analyze(self, table: str, tx: Store) -> None:
        await tx.planner_statistics.analyze(table, target=self.config.target)

    async def run_once(self) -> StatisticsResult:
        cfg = self.config
        stale = await self.db.transaction(
            lambda tx: tx.planner_statistics.stale_tables(min_rows=cfg.min_rows, fraction=cfg.fraction)
        )
        now = time.monotonic()
        due = sorted(t for t in stale if now - self._analyzed_at.get(t, -math.inf) >= cfg.min_gap_s)
        for table in due:
            await self.db.transaction(functools.partial(self._analyze, table), isolation="READ COMMITTED")
            self._analyzed_at[table] = time.monotonic()
        if due:
            log.info("planner statistics refreshed", extra={"tables": due, "stale": sorted(stale)})
        return StatisticsResult(tuple(due))

    async def run(self, stop: asyncio.Event) -> None:
        if self.enabled:
            await run_every("statistics", self.config.interval_s, stop, self.run_once)
