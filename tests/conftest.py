"""Shared fixtures: one embedded PostgreSQL for the whole run, a fresh database per test.

Each test database is cloned from a template that already has every migration applied, so a
test starts from a clean schema in a few milliseconds. Everything runs at SERIALIZABLE.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from cryptography.fernet import Fernet

from app.store import embedded, migrate
from app.store.db import Database, create_engine

TEMPLATE = "kairos_template"
# One signing-secret key for the run (app.store.sealing): this process and every kairos process the tests
# start (they inherit it) seal and open tenants' signing secrets alike. Tests that start processes with a
# cleaned environment pass it on themselves (or use an embedded KAIROS_HOME, whose key file is generated).
os.environ.setdefault("KAIROS_SECRET_KEY", Fernet.generate_key().decode())


def _admin_url(base: str) -> str:
    return base.replace("postgresql+psycopg://", "postgresql://")


@pytest.fixture(scope="session")
def pg_base_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL (SQLAlchemy form) of the session's embedded server, database 'postgres'."""
    # Unix socket paths are limited to ~107 bytes: keep the data directory short.
    # Under pytest-xdist every worker process starts a server of its own, in a directory of its own.
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    given = os.environ.get("KAIROS_TEST_PGDATA")
    pgdata = Path(f"{given}-{worker}" if given and worker else given or f"/tmp/kairos-test-{os.getpid()}")
    url = embedded.start(pgdata, cleanup="delete")
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


@contextmanager
def fresh_database(base_url: str, template: str) -> Iterator[str]:
    """Clone the migrated template into a new database; drop it afterwards."""
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = _admin_url(base_url)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {template}")
    try:
        yield embedded.to_sqlalchemy_url(admin, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(pg_base_url: str, pg_template: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    with fresh_database(pg_base_url, pg_template) as url:
        yield url


@pytest.fixture(scope="module")
def module_database_url(pg_base_url: str, pg_template: str) -> Iterator[str]:
    """A fresh, migrated database shared by one test module (e.g. behind one API process)."""
    with fresh_database(pg_base_url, pg_template) as url:
        yield url


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    database = Database(create_engine(database_url, isolation="SERIALIZABLE", pool_size=5))
    yield database
    await database.close()
