"""Execution-history retention: take old final executions and their attempts out, and load them back.

The rows leave as plain dicts of every column (``RETURNING *``), so an archive keeps whatever the
schema holds at the time, columns added by later migrations included, and a restore puts back
exactly what was archived (``jsonb_populate_recordset`` into the same tables). The archive format and
the duty around these statements are ``app.store.archive`` and ``app.executor.retention``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from app.store.arrays import plain
from app.store.partitions import Partitions
from app.store.queries import q
from app.store.table import Table

Row = dict[str, Any]


class Retention(Table):
    """The retention statements of one transaction."""

    async def take(
        self,
        limit: int,
        retention_s: float,
        *,
        now: datetime | None = None,
    ) -> tuple[list[Row], list[Row]]:
        """Delete up to ``limit`` final executions finished over ``retention_s`` ago, oldest first, and their
        attempts; both as rows of every column. The caller archives them before the transaction commits."""
        executions = [
            dict(r._mapping)
            for r in await self._conn.execute(
                q("RetentionTakeExecutions"), {"limit": limit, "retention_s": retention_s, "now": now}
            )
        ]
        if not executions:
            return [], []
        attempts = [
            dict(r._mapping)
            for r in await self._conn.execute(
                q("RetentionTakeAttempts"), {"execution_ids": plain([e["execution_id"] for e in executions])}
            )
        ]
        return executions, attempts

    async def take_finished_jobs(
        self, limit: int, *, now: datetime | None = None
    ) -> tuple[list[Row], list[Row], list[Row]]:
        """Delete up to ``limit`` jobs whose deleteAfterCompletionSeconds has passed since they finished, with
        their executions and attempts; all three as rows of every column. The caller archives them before
        the transaction commits."""
        jobs = [dict(r._mapping) for r in await self._conn.execute(q("JobRemovalTake"), {"limit": limit, "now": now})]
        if not jobs:
            return [], [], []
        executions = [
            dict(r._mapping)
            for r in await self._conn.execute(
                q("JobRemovalTakeExecutions"), {"job_ids": plain([j["job_id"] for j in jobs])}
            )
        ]
        attempts = (
            [
                dict(r._mapping)
                for r in await self._conn.execute(
                    q("JobRemovalTakeAttempts"), {"execution_ids": plain([e["execution_id"] for e in executions])}
                )
            ]
            if executions
            else []
        )
        return jobs, executions, attempts

    async def restore(self, executions: Sequence[Row], attempts: Sequence[Row]) -> tuple[int, int]:
        """Insert archived rows back (those present already stay as they are); how many of each went in."""
        restored = attempts_restored = 0
        if executions:  # into a week that retention dropped: its partition comes back until it expires again
            await Partitions(self._conn).cover([_instant(e["scheduled_for"]) for e in executions])
            rows = await self._conn.execute(
                q("RetentionRestoreExecutions"), {"rows": msgspec.json.encode(list(executions)).decode()}
            )
            restored = len(rows.fetchall())
        if attempts:
            rows = await self._conn.execute(
                q("RetentionRestoreAttempts"), {"rows": msgspec.json.encode(list(attempts)).decode()}
            )
            attempts_restored = len(rows.fetchall())
        return restored, attempts_restored


def _instant(value: datetime | str) -> datetime:
    """An archived instant (RFC 3339 text) or a row's own."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)
