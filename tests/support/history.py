"""The history layout of a database converted while it held history, given to a fresh test database.

A fresh database starts its weekly partitions this week (migration 0039): its recent rows go to
them. A database that 0022 converted while it held history keeps writing to the legacy partitions
until its cutover, the Monday after next, and the executors' batched ``RetentionPruner`` (which
takes from the legacy partitions only) empties them. Tests of that pruner, and of plans on that
layout, move their empty database's cutover there; ``kairos_history_recut`` (0021) refuses once
executions or attempts hold a row.
"""

from __future__ import annotations

from sqlalchemy import text

from app.store.db import Database

# The cutover 0022 picks on a database whose history ends before now: the Monday after next.
RECUT_AS_CONVERTED = "SELECT kairos_history_recut(kairos_history_week(now()) + interval '14 days')"


async def recut_as_converted(db: Database) -> None:
    """Keep ``db``'s recent history in the legacy partitions, as a converted database does."""
    async with db.engine.begin() as conn:
        await conn.execute(text(RECUT_AS_CONVERTED))
