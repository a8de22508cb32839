"""Shared fixtures: one embedded PostgreSQL for the whole run, a fresh database per test.

Each test database is cloned from a template that already has every migration applied, so a
test starts from a clean schema in a few milliseconds. Everything runs at SERIALIZABLE.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest

from app.store import embedded, migrate
from app.store.db import Database, create_engine

TEMPLATE = "kairos_template"


def _admin_url(base: str) -> str:
    return base.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="session")
def pg_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL (SQLAlchemy form) of the session's embedded server, database 'postgres'."""
    # Unix socket paths are limited to ~107 bytes: keep the data directory short.
    pgdata = Path(os.environ.get("KAIROS_TEST_PGDATA", f"/tmp/kairos-test-{os.getpid()}"))
    url = embedded.start(pgdata)
    yield url


@pytest.fixture(scope="session")
def pg_template(pg_base_url: str) -> str:
    admin = _admin_url(pg_base_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE}")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    url = embedded.to_sqlalchemy_url(admin.replace("postgresql://", "postgresql+psycopg://"), TEMPLATE)

    async def build() -> None:
        db = Database(create_engine(url, pool_size=2))
        await migrate.upgrade(db)
        await db.close()

    asyncio.run(build())
    return TEMPLATE


@pytest.fixture
def database_url(pg_base_url: str, pg_template: str) -> Iterator[str]:
    """A fresh, migrated database for one test; dropped afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = _admin_url(pg_base_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {pg_template}")
    yield embedded.to_sqlalchemy_url(admin, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(create_engine(database_url, isolation="SERIALIZABLE", pool_size=5))
    yield database
    await database.close()
