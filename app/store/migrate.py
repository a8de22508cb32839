"""Apply ``sql/migrations/NNNN_*.sql`` in order, once each, safely from many processes at once.

No advisory locks (CockroachDB ignores them): each migration runs in the same transaction as
its row in ``schema_migrations``; a concurrent process blocks on that row's unique key and,
once the winner commits, finds it taken and skips the file.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import random
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable

from app import errors
from app.store.db import LOCK_NOT_AVAILABLE, Database
from app.store.queries import COCKROACH, sql_files
from app.store.seam import Store

log = logging.getLogger(__name__)

# Concurrent CREATE TABLE IF NOT EXISTS can collide in the catalogue (unique_violation,
# duplicate_table/object) before either commits; running it again then finds the table.
_CATALOGUE_RACES = frozenset({"23505", "42P07", "42710"})
UNDEFINED_TABLE = "42P01"  # schema_migrations itself is missing: nothing applied yet
# A statement's lock waited for briefly and not granted (0021's kairos_ddl_briefly): run it again, in a
# new transaction, so that whatever this one held (a CREATE INDEX CONCURRENTLY elsewhere waits for it) is let go.
LOCK_TRIES = 60
# A deadlock between processes migrating at once (0022's conversion steps take locks in different orders
# under load) outlasts the database's own few retries: the statement is idempotent, so it runs again too.
DEADLOCK_DETECTED = "40P01"
_MIGRATION = re.compile(r"^(\d{4}_.+)\.sql$")
# Markers, each a line of its own among the first lines of a migration (the lines that start with
# "-- kairos:"; a file may carry both).
# Statements that may not run in a transaction block (PostgreSQL's CREATE INDEX CONCURRENTLY): each
# runs alone in autocommit, and must be idempotent (IF NOT EXISTS).
NO_TRANSACTION = "-- kairos: no-transaction"
# PostgreSQL's own DDL (storage parameters, partitioning): on CockroachDB the file is recorded as
# applied and not run.
POSTGRESQL_ONLY = "-- kairos: postgresql-only"
_MARKER = "-- kairos:"


@dataclass(frozen=True)
class Migration:
    version: str
    path: Traversable

    @property
    def script(self) -> str:
        return self.path.read_text()

    @property
    def markers(self) -> frozenset[str]:
        """The leading ``-- kairos:`` lines."""
        found = set()
        for line in self.script.splitlines():
            if not line.startswith(_MARKER):
                break
            found.add(line.strip())
        return frozenset(found)

    @property
    def postgresql_only(self) -> bool:
        return POSTGRESQL_ONLY in self.markers

    @property
    def transactional(self) -> bool:
        return NO_TRANSACTION not in self.markers

    def statements(self) -> list[str]:
        """The script's statements, split at a `;` that ends a line (whole-line comments left out)."""
        kept = [line for line in self.script.splitlines() if not line.lstrip().startswith("--")]
        return [s.strip() for s in re.split(r";\s*$", "\n".join(kept), flags=re.MULTILINE) if s.strip()]

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
        if not migration.transactional:
            if await _apply_outside_transaction(db, migration):
                log.info("migration applied", extra={"version": migration.version})
                done.append(migration.version)
            continue

        async def apply(s: Store, m: Migration = migration) -> bool:
            if not await s.schema.claim(m.version, m.checksum):
                return False
            if not (m.postgresql_only and db.dialect == COCKROACH):
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


async def _apply_outside_transaction(db: Database, m: Migration) -> bool:
    """Each statement in autocommit (a concurrent process may run the same ones: IF NOT EXISTS), then
    the ledger row. A crash in between leaves the file unrecorded; the next run finds its work done.
    A CREATE INDEX CONCURRENTLY that failed leaves an INVALID index, which IF NOT EXISTS then skips:
    docs/database-at-scale.md says how an operator finds and rebuilds one."""
    if m.version in await applied(db):
        return False
    if m.postgresql_only and db.dialect == COCKROACH:
        return bool(await db.transaction(lambda s: s.schema.claim(m.version, m.checksum)))
    for statement in m.statements():
        await _alone(db, statement)
    return bool(await db.transaction(lambda s: s.schema.claim(m.version, m.checksum)))


async def _alone(db: Database, statement: str) -> None:
    """One statement in autocommit; again after a pause while its lock is not granted or it deadlocked."""
    for attempt in range(1, LOCK_TRIES + 1):
        try:
            await db.outside_transaction(statement)
            return
        except errors.StoreError as exc:
            if exc.sqlstate not in (LOCK_NOT_AVAILABLE, DEADLOCK_DETECTED) or attempt == LOCK_TRIES:
                raise
            await asyncio.sleep(random.uniform(0.1, 1.0))


async def pending(db: Database) -> list[str]:
    known = await applied(db)
    return [m.version for m in available() if m.version not in known]
