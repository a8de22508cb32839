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

from app import errors
from app.store.db import Database
from app.store.queries import sql_files
from app.store.seam import Store

log = logging.getLogger(__name__)

# Concurrent CREATE TABLE IF NOT EXISTS can collide in the catalogue (unique_violation,
# duplicate_table/object) before either commits; running it again then finds the table.
_CATALOGUE_RACES = frozenset({"23505", "42P07", "42710"})
UNDEFINED_TABLE = "42P01"  # schema_migrations itself is missing: nothing applied yet
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
        """Of the statements alone: rewording a whole-line ``--`` comment is not a schema change."""
        return statements_checksum(self.script)

    @property
    def legacy_checksum(self) -> str:
        """Of the whole file, as recorded before comments were left out."""
        return hashlib.sha256(self.script.encode()).hexdigest()


def statements_checksum(script: str) -> str:
    kept = [line.rstrip() for line in script.splitlines() if line.strip() and not line.lstrip().startswith("--")]
    return hashlib.sha256("\n".join(kept).encode()).hexdigest()


def available() -> list[Migration]:
    return [Migration(m.group(1), f) for f in sql_files("migrations") if (m := _MIGRATION.match(f.name))]


async def _ensure_table(db: Database) -> None:
    for _ in range(10):
        try:
            await db.transaction(lambda s: s.schema.create_ledger())
            return
        except errors.StoreError as exc:
            if exc.sqlstate not in _CATALOGUE_RACES:
                raise
            await asyncio.sleep(0.05)
    raise RuntimeError("could not create schema_migrations")


async def applied(db: Database) -> dict[str, str]:
    try:
        return await db.transaction(lambda s: s.schema.applied())
    except errors.StoreFailure as exc:
        if exc.sqlstate == UNDEFINED_TABLE:
            return {}
        raise


async def upgrade(db: Database) -> list[str]:
    """Apply pending migrations; return the versions this call applied."""
    await _ensure_table(db)
    done: list[str] = []
    for migration in available():

        async def apply(s: Store, m: Migration = migration) -> bool:
            if not await s.schema.claim(m.version, m.checksum):
                return False
            await s.schema.run_script(m.script)
            return True

        if await db.transaction(apply):
            log.info("migration applied", extra={"version": migration.version})
            done.append(migration.version)
    known = await applied(db)
    for migration in available():
        if known.get(migration.version) not in (None, migration.checksum, migration.legacy_checksum):
            log.warning("migration file changed after it was applied", extra={"version": migration.version})
    return done


async def pending(db: Database) -> list[str]:
    known = await applied(db)
    return [m.version for m in available() if m.version not in known]
