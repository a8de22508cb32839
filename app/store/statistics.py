"""Planner statistics of the hot tables (PostgreSQL; CockroachDB keeps its own up to date)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.queries import q


async def stale_tables(conn: AsyncConnection, *, min_rows: int, fraction: float) -> list[str]:
    rows = await conn.execute(q("StatisticsStaleTables"), {"min_rows": min_rows, "fraction": fraction})
    return [r.relname for r in rows]


async def analyze_hot_tables(conn: AsyncConnection) -> None:
    await conn.execute(q("StatisticsAnalyzeHotTables"))
