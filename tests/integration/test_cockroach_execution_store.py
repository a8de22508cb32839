"""tests/integration/test_execution_store.py again, through the CockroachDB driver path: the
sqlalchemy-cockroachdb dialect, so every statement with a CockroachDB text of its own
(sql/cockroach/queries: the fair lease, complete, fail) runs that text; against PostgreSQL here, and
against CockroachDB itself when KAIROS_DATABASE_URL is a cockroachdb:// URL. The same assertions hold
for both texts: same leases, same fencing, same attempts rows."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from app.store.db import Database, create_engine
from tests.integration import cockroach_cluster
from tests.integration.test_execution_store import *  # noqa: F403 - the same tests, collected here again


@pytest.fixture
async def db(database_url: str) -> AsyncIterator[Database]:
    if cockroach_cluster.REAL:  # CockroachDB itself (docs/cockroachdb.md, "Verify on a real cluster")
        async with cockroach_cluster.fresh_database() as real:
            yield real
        return
    database = Database(
        create_engine(
            database_url.replace("postgresql+psycopg://", "cockroachdb+psycopg://"),
            isolation="SERIALIZABLE",
            pool_size=5,
        )
    )
    assert database.dialect == "cockroachdb"
    yield database
    await database.close()
