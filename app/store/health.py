"""Database reachability."""

from __future__ import annotations

from app.store.db import Database
from app.store.queries import q


async def ping(db: Database) -> None:
    async with db.engine.connect() as conn:
        await conn.execute(q("HealthPing"))
