"""A real CockroachDB for the test_cockroach_* modules, when one is given (docs/cockroachdb.md).

CockroachDB cannot run on the development machines, so by default those modules check its
statements on PostgreSQL through the cockroachdb dialect. With ``KAIROS_DATABASE_URL`` set to a
``cockroachdb://`` URL (``cockroach demo --nodes 9 --global``), ``fresh_database`` makes a new
database there for each test, migrated, and the modules run against CockroachDB itself.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from sqlalchemy.engine import make_url

from app.store import Database, migrate
from app.store.db import create_engine

URL = os.environ.get("KAIROS_DATABASE_URL", "")
REAL = URL.startswith("cockroachdb")
WHY_SKIPPED = "needs a CockroachDB: KAIROS_DATABASE_URL=cockroachdb://... (docs/cockroachdb.md)"


def _admin(url: str, database: str) -> str:
    u = make_url(url).set(drivername="postgresql", database=database)
    return u.render_as_string(hide_password=False)


@asynccontextmanager
async def fresh_database() -> AsyncIterator[Database]:
    """A new, migrated database on the CockroachDB cluster of KAIROS_DATABASE_URL; dropped afterwards."""
    name = f"kairos_t_{uuid.uuid4().hex[:12]}"
    admin = _admin(URL, "defaultdb")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")
    db = Database(create_engine(make_url(URL).set(database=name).render_as_string(hide_password=False), pool_size=5))
    try:
        await migrate.upgrade(db)
        yield db
    finally:
        await db.close()
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} CASCADE")
