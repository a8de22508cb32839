"""Planner statistics of the hot tables (PostgreSQL; CockroachDB keeps its own up to date)."""

from __future__ import annotations

from app.store.queries import q
from app.store.table import Table


class Statistics(Table):
    """The statistics statements of one transaction."""

    async def stale_tables(self, *, min_rows: int, fraction: float) -> list[str]:
        rows = await self._conn.execute(q("StatisticsStaleTables"), {"min_rows": min_rows, "fraction": fraction})
        return [r.relname for r in rows]

    async def analyze_hot_tables(self) -> None:
        await self._conn.execute(q("StatisticsAnalyzeHotTables"))
