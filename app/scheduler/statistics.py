"""StatisticsKeeper: re-analyzes the hot tables as soon as a burst of writes made their statistics stale.

A herd is written in a burst just before its due time (submits into jobs and due_index, then
dispatch into executions and attempts). Until the planner's statistics see those rows, it plans
the lease and dispatch statements for the tables it last analyzed (an empty ready queue), and
those plans were 10-25x slower through a herd; autovacuum's own analyze came about a minute
later. This duty checks every ``interval_s`` whether a hot table changed by at least
``min_rows`` rows and ``fraction`` of its size since its last analyze, and then analyzes them.
PostgreSQL only: on CockroachDB the duty does nothing (its automatic statistics cover this).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from app.duties import run_every
from app.store import Database

log = logging.getLogger(__name__)

STATISTICS_INTERVAL_S_DEFAULT = 1.0
STATISTICS_MIN_ROWS_DEFAULT = 5_000
STATISTICS_FRACTION_DEFAULT = 0.2


@dataclass(frozen=True)
class StatisticsKeeperConfig:
    interval_s: float = STATISTICS_INTERVAL_S_DEFAULT
    # A table is stale once this many rows changed since its last analyze ...
    min_rows: int = STATISTICS_MIN_ROWS_DEFAULT
    # ... and at least this fraction of its rows.
    fraction: float = STATISTICS_FRACTION_DEFAULT

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.min_rows < 1 or self.fraction < 0:
            raise ValueError("interval_s > 0, min_rows >= 1 and fraction >= 0 are required")


@dataclass(frozen=True)
class StatisticsResult:
    analyzed: tuple[str, ...]  # the stale tables that triggered an analyze (empty: none)


class StatisticsKeeper:
    def __init__(self, db: Database, config: StatisticsKeeperConfig = StatisticsKeeperConfig()) -> None:
        self.db = db
        self.config = config

    @property
    def enabled(self) -> bool:
        return self.db.dialect == "postgresql"

    async def run_once(self) -> StatisticsResult:
        cfg = self.config
        stale = await self.db.transaction(
            lambda tx: tx.statistics.stale_tables(min_rows=cfg.min_rows, fraction=cfg.fraction))
        if not stale:
            return StatisticsResult(())
        await self.db.transaction(lambda tx: tx.statistics.analyze_hot_tables(), isolation="READ COMMITTED")
        log.info("planner statistics refreshed", extra={"stale": sorted(stale)})
        return StatisticsResult(tuple(sorted(stale)))

    async def run(self, stop: asyncio.Event) -> None:
        if self.enabled:
            await run_every("statistics", self.config.interval_s, stop, self.run_once)
