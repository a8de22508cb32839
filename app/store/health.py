"""Database reachability."""

from __future__ import annotations

from app.store.db import Database


async def ping(db: Database) -> None:
    await db.transaction(lambda s: s.schema.ping(), isolation="READ COMMITTED")
