"""Apply ``sql/migrations/NNNN_*.sql`` in order, once each, safely from many processes at once.

No advisory locks (CockroachDB ignores them): each migration runs in the same transaction as
its row in ``schema_migrations``; a concurrent process blocks on that row's unique key and,
once the winner commits, finds it taken and skips the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from sqlalchemy.exc import DBAPIError, ProgrammingError
from sqlalchemy.ext.asyncio import AsyncConnection

from app.store.db import Database, sqlstate
from app.store.queries import q, sql_files

log = logging.getLogger(__name__)

# Concurrent CREATE TABLE IF NOT EXISTS can collide in the catalogue (unique_violation,
# duplicate_table/object) before either commits; running it again then finds the table.
_CATALOGUE_RACES = frozenset({"23505", "42P07", "42710"})
_MIGRATION = re.compile(r"^(\d{4}_.+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: str
    path: Traversable

    @property
    def script(self) -> str:
        return self.path.read_text()

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.script.encode()).hexdigest()


def available() -> list[Migration]:
    return [Migration(m.group(1), f) for f in sql_files("migrations") if (m := _MIGRATION.match(f.name))]


async def _ensure_table(db: Database) -> None:
    for _ in range(10):
        try:
            await db.transaction(lambda c: c.execute(q("SchemaMigrationsCreate")))
            return
        except (DBAPIError, ProgrammingError) as exc:
            if sqlstate(exc) not in _CATALOGUE_RACES:
                raise
            await asyncio.sleep(0.05)
    raise RuntimeError("could not create schema_migrations")


async def applied(db: Database) -> dict[str, str]:
    async def read(conn: AsyncConnection) -> dict[str, str]:
        rows = await conn.execute(q("SchemaMigrationsList"))
        return {r.version: r.checksum for r in rows}

    try:
        return await db.transaction(read)
    except ProgrammingError:
        return {}


async def upgrade(db: Database) -> list[str]:
    """Apply pending migrations; return the versions this call applied."""
    await _ensure_table(db)
    done: list[str] = []
    for migration in available():

        async def apply(conn: AsyncConnection, m: Migration = migration) -> bool:
            claimed = (await conn.execute(q("SchemaMigrationClaim"),
                                          {"version": m.version, "checksum": m.checksum})).first()
            if claimed is None:
                return False
            await conn.exec_driver_sql(m.script)
            return True

        if await db.transaction(apply):
            log.info("migration applied", extra={"version": migration.version})
            done.append(migration.version)
    known = await applied(db)
    for migration in available():
        if known.get(migration.version) not in (None, migration.checksum):
            log.warning("migration file changed after it was applied", extra={"version": migration.version})
    return done


async def pending(db: Database) -> list[str]:
    known = await applied(db)
    return [m.version for m in available() if m.version not in known]
