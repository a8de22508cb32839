"""HistoryPartitioner: weekly partitions of execution history, created ahead and dropped whole at retention.

On PostgreSQL ``executions`` and ``attempts`` are partitioned by week of ``scheduled_for``
(migrations 0021 and 0022; docs/database-at-scale.md). Every scheduler runs this duty (``kairos
scheduler``, and so ``kairos up``): the scheduler is what writes executions, so the partitions its
dispatches need are there before their week starts. A pass:

1. creates the partitions of the current week and the next ``weeks_ahead`` (idempotent: schedulers
   running it at once create each one once);
2. with a retention (KAIROS_RETENTION_DAYS > 0), for each week that ended more than a retention ago:
   unless it still holds live work (ready, leased) or a row finished or restored within the
   retention, its executions and their attempts are written to the object store as archives of
   ``batch`` executions (the format of app.store.archive, read in execution-id order, nothing
   deleted), then both partitions are detached and dropped. The drop looks again once the partitions
   are detached (no row can arrive then) and leaves them in place when something came meanwhile.

A crash between the archives and the drop archives the week again on the next pass: archives may
overlap, never miss a row (``kairos history restore`` is idempotent). Rows in the default
partitions (before the first weekly partition, or outside every one) leave by the executors'
batched RetentionPruner as before. On CockroachDB (one table, row-level TTL) the duty does nothing.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from uuid import UUID

from app import observability
from app.config import Settings
from app.duties import run_every
from app.errors import StoreFailure
from app.store import Database, Store, archive
from app.store.db import LOCK_NOT_AVAILABLE
from app.store.objects import ObjectStore, open_store
from app.store.partitions import WEEK, Held, Week

log = logging.getLogger(__name__)

PartitionsIntervalDefault = 3600.0
PartitionsWeeksAheadDefault = 2
PartitionsBatchDefault = 10_000


@dataclass(frozen=True)
class PartitionerConfig:
    # How often to create partitions ahead and look for weeks past the retention; the first pass runs at start.
    interval_s: float = PartitionsIntervalDefault
    # Weeks after the current one whose partitions exist ahead of time.
    weeks_ahead: int = PartitionsWeeksAheadDefault
    # A week leaves once it ended this long ago (KAIROS_RETENTION_DAYS); 0 keeps everything.
    retention_days: float = 30.0
    # Executions per archive object.
    batch: int = PartitionsBatchDefault
    # The drop waits for its locks a few times 200 ms at most (kairos_ddl_briefly), and gives up while a
    # long reader of history (a report, a dump) stands in the way; its archives written, it tries again
    # after these pauses (seconds) before the pass gives up and the next one archives the week again.
    drop_pauses_s: tuple[float, ...] = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)

    def __post_init__(self) -> None:
        if self.interval_s <= 0 or self.weeks_ahead < 1 or self.retention_days < 0 or self.batch < 1:
            raise ValueError("interval_s > 0, weeks_ahead >= 1, retention_days >= 0 and batch >= 1")

    @classmethod
    def from_settings(cls, settings: Settings) -> PartitionerConfig:
        return cls(retention_days=settings.retention_days, batch=max(settings.retention_batch, 1000))


@dataclass(frozen=True)
class WeekOut:
    """One week past the retention, as a pass left it."""

    week: Week
    outcome: str  # 'dropped', 'held' (live or recent rows: kept), 'absent' (another pass dropped it)
    executions: int = 0
    attempts: int = 0
    archives: tuple[str, ...] = ()
    duration_s: float = 0.0


@dataclass(frozen=True)
class PartitionPass:
    created: int = 0
    weeks: tuple[WeekOut, ...] = ()


def objects_for(settings: Settings) -> ObjectStore:
    return open_store(
        settings.archive_url, settings.home, endpoint=settings.archive_endpoint, region=settings.archive_region
    )


@dataclass
class HistoryPartitioner:
    db: Database
    objects: ObjectStore
    config: PartitionerConfig = PartitionerConfig()
    total: dict[str, int] = field(default_factory=lambda: {"created": 0, "dropped": 0, "executions": 0})
    drop_waits: int = 0  # drops that could not have their locks and were tried again

    @property
    def enabled(self) -> bool:
        return self.db.dialect == "postgresql"

    async def run_once(self, *, now: datetime | None = None) -> PartitionPass:
        now = now or datetime.now(timezone.utc)
        created = await self.db.transaction(
            lambda tx: tx.partitions.ensure(now, now + self.config.weeks_ahead * WEEK), isolation="READ COMMITTED"
        )
        self.total["created"] += created
        if created:
            log.info("history partitions created", extra={"partitions": created})
        if self.config.retention_days == 0:
            return PartitionPass(created)
        cutoff = now - timedelta(days=self.config.retention_days)
        weeks = await self.db.read(lambda tx: tx.partitions.weeks())
        out = [await self.retire(week, cutoff) for week in weeks if week.hi <= cutoff]
        return PartitionPass(created, tuple(out))

    async def retire(self, week: Week, cutoff: datetime) -> WeekOut:
        """Archive the week's rows, then detach and drop its partitions (unless something keeps it)."""
        started = time.monotonic()
        held: Held = await self.db.read(lambda tx: tx.partitions.held(week))
        if held.keeps(cutoff):
            log.info(
                "history week kept", extra={"week": week.lo.isoformat(), "ready": held.ready, "leased": held.leased}
            )
            return WeekOut(week, "held")
        keys: list[str] = []
        executions = attempts = 0
        after: UUID | None = None
        while True:

            async def batch(tx: Store, after: UUID | None = after) -> tuple[list[archive.Row], list[archive.Row]]:
                rows = await tx.partitions.executions(week, after=after, limit=self.config.batch)
                return rows, (await tx.partitions.attempts(week, [r["execution_id"] for r in rows]) if rows else [])

            rows, their_attempts = await self.db.transaction(batch, isolation="READ COMMITTED")  # the primary: no lag
            if not rows:
                break
            key = archive.key_for(rows)
            data = await asyncio.to_thread(archive.encode, rows, their_attempts)  # off the event loop
            await self.objects.put(key, data)
            keys.append(key)
            executions += len(rows)
            attempts += len(their_attempts)
            after = rows[-1]["execution_id"]
        outcome = await self.drop(week, cutoff)
        took = time.monotonic() - started
        if outcome == "dropped":
            self.total["dropped"] += 1
            self.total["executions"] += executions
            observability.history_archived.add(executions, {"table": "executions"})
            observability.history_archived.add(attempts, {"table": "attempts"})
        log.info(
            "history week retired" if outcome == "dropped" else "history week kept",
            extra={
                "week": week.lo.isoformat(),
                "outcome": outcome,
                "executions": executions,
                "attempts": attempts,
                "archives": len(keys),
                "store": self.objects.url,
                "duration_ms": round(took * 1000),
            },
        )
        return WeekOut(week, outcome, executions, attempts, tuple(keys), took)

    async def drop(self, week: Week, cutoff: datetime) -> str:
        """The week's partitions detached and dropped (kairos_history_partition_drop), tried again after
        each of config.drop_pauses_s while its locks cannot be had."""
        for pause in self.config.drop_pauses_s:
            try:
                return await self._drop_once(week, cutoff)
            except StoreFailure as exc:
                if exc.sqlstate != LOCK_NOT_AVAILABLE:
                    raise
            self.drop_waits += 1
            log.warning(
                "history week drop waits for its locks", extra={"week": week.lo.isoformat(), "retry_in_s": pause}
            )
            await asyncio.sleep(pause)
        return await self._drop_once(week, cutoff)

    async def _drop_once(self, week: Week, cutoff: datetime) -> str:
        outcome: str = await self.db.transaction(
            lambda tx: tx.partitions.drop(week, cutoff), isolation="READ COMMITTED"
        )
        return outcome

    async def run(self, stop: asyncio.Event) -> None:
        if self.enabled:
            await run_every("history-partitions", self.config.interval_s, stop, self.run_once)
