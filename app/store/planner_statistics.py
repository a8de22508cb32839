"""Planner statistics of the hot tables (PostgreSQL; CockroachDB keeps its own up to date): what ANALYZE
last measured, not the figures the dashboard shows (those are ``app.store.stats``)."""

from __future__ import annotations

from app.store.queries import q
from app.store.table import Table

# The hot tables and the statement that analyzes each (StatisticsStaleTables names only these).
_ANALYZE = {
    "jobs": "StatisticsAnalyzeJobs",
    "due_index": "StatisticsAnalyzeDueIndex",
    "executions": "StatisticsAnalyzeExecutions",
    "attempts": "StatisticsAnalyzeAttempts",
}
HOT_TABLES = tuple(_ANALYZE)


class PlannerStatistics(Table):
    """The planner statistics statements of one transaction."""

    async def stale_tables(self, *, min_rows: int, fraction: float) -> list[str]:
        rows = await self._conn.execute(q("StatisticsStaleTables"), {"min_rows": min_rows, "fraction": fraction})
        return [r.relname for r in rows]

    async def analyze(self, table: str, *, target: int | None = None) -> None:
        """ANALYZE one of :data:`HOT_TABLES` (KeyError for any other name); ``target`` sets the statistics
        target of this transaction's ANALYZE (its sample is 300 x target rows; None: the server's)."""
        if target is not None:
            await self._conn.execute(q("StatisticsTargetForTransaction"), {"target": target})
        await self._conn.execute(q(_ANALYZE[table]))
