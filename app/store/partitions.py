"""Weekly partitions of execution history on PostgreSQL: created ahead, archived and dropped whole.

``executions`` and ``attempts`` are partitioned by range of ``scheduled_for``, one partition a UTC
week (migrations 0021 and 0022; docs/database-at-scale.md). The functions these statements call are
PostgreSQL's; on CockroachDB (one table, row-level TTL) the same names do nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any
from uuid import UUID

from app.store.arrays import plain
from app.store.queries import COCKROACH, q
from app.store.table import Table

Row = dict[str, Any]
WEEK = timedelta(days=7)


def week_of(at: datetime) -> datetime:
    """Monday 00:00 UTC of the week holding ``at``: where a partition starts."""
    day = at.astimezone(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return day - timedelta(days=day.weekday())


@dataclass(frozen=True)
class Week:
    """One weekly partition's range [lo, hi)."""

    lo: datetime
    hi: datetime


@dataclass(frozen=True)
class Held:
    """What keeps a week's partition from leaving: live executions, and the latest finish and restore in it."""

    ready: int
    leased: int
    finished_at: datetime | None
    restored_at: datetime | None

    def keeps(self, cutoff: datetime) -> bool:
        """True while the week holds live work, or a row finished or restored after ``cutoff``."""
        return bool(
            self.ready
            or self.leased
            or (self.finished_at is not None and self.finished_at >= cutoff)
            or (self.restored_at is not None and self.restored_at >= cutoff)
        )


# Per database, the weeks this process saw partitioned (both tables): rows of the current week or
# later need no look. Retention only drops weeks that ended a retention ago, so a week from now on stays.
_present: dict[str, set[datetime]] = {}


class Partitions(Table):
    """The history-partition statements of one transaction."""

    @property
    def _partitioned(self) -> bool:
        return self._conn.dialect.name != COCKROACH

    async def ensure(self, from_at: datetime, to_at: datetime) -> int:
        """Create the weekly partitions from ``from_at`` to ``to_at`` (inclusive weeks) that are missing."""
        if not self._partitioned:
            return 0
        row = (await self._conn.execute(q("HistoryPartitionsEnsure"), {"from_at": from_at, "to_at": to_at})).one()
        return int(row.created)

    async def cover(self, scheduled_fors: Sequence[datetime], *, now: datetime | None = None) -> int:
        """Make sure rows scheduled at ``scheduled_fors`` have a partition to go to (a week in the past
        that retention dropped, or one beyond those created ahead). Weeks from the current one on that
        this process saw created cost nothing; any other asks the database."""
        if not self._partitioned or not scheduled_fors:
            return 0
        this_week = week_of(now or datetime.now(timezone.utc))
        lo, hi = min(scheduled_fors), max(scheduled_fors)
        seen = _present.setdefault(str(self._conn.engine.url), set())
        # The hot path (a dispatch batch): this week's or the next, both seen created. min and max only.
        if lo >= this_week and hi < this_week + 2 * WEEK and {week_of(lo), week_of(hi)} <= seen:
            return 0
        row = (await self._conn.execute(q("HistoryPartitionsCover"), {"scheduled_fors": plain(scheduled_fors)})).one()
        seen.update(w for w in {week_of(s) for s in scheduled_fors} if w >= this_week)
        return int(row.created)

    async def weeks(self) -> list[Week]:
        """The weeks that have a partition, oldest first (none on CockroachDB)."""
        return [Week(r.lo, r.hi) for r in await self._conn.execute(q("HistoryPartitionsList"))]

    async def held(self, week: Week) -> Held:
        row = (await self._conn.execute(q("HistoryPartitionHeld"), {"lo": week.lo, "hi": week.hi})).one()
        return Held(int(row.ready), int(row.leased), row.finished_at, row.restored_at)

    async def executions(self, week: Week, *, after: UUID | None, limit: int) -> list[Row]:
        """Up to ``limit`` of the week's executions after ``after`` (by id), every column."""
        rows = await self._conn.execute(
            q("HistoryPartitionExecutions"), {"lo": week.lo, "hi": week.hi, "after_id": after, "limit": limit}
        )
        return [dict(r._mapping) for r in rows]

    async def attempts(self, week: Week, execution_ids: Sequence[UUID]) -> list[Row]:
        rows = await self._conn.execute(
            q("HistoryPartitionAttempts"), {"lo": week.lo, "hi": week.hi, "execution_ids": plain(list(execution_ids))}
        )
        return [dict(r._mapping) for r in rows]

    async def drop(self, week: Week, cutoff: datetime) -> str:
        """Detach and drop the week's partitions of attempts and executions (archived first by the caller),
        unless it holds live work or a row finished or restored at or after ``cutoff``: 'dropped', 'held'
        (nothing changed) or 'absent'."""
        if not self._partitioned:
            return "absent"
        _present.get(str(self._conn.engine.url), set()).discard(week.lo)
        row = (await self._conn.execute(q("HistoryPartitionDrop"), {"lo": week.lo, "cutoff": cutoff})).one()
        return str(row.outcome)
