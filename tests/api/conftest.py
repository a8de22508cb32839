"""A real `kairos api` process per test module, on its own database; a tenant per test."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from app.store.db import Database, create_engine
from app.store.tenants import signing_secrets_of
from tests.conftest import free_port
from tests.support.polling import wait_for


@dataclass(frozen=True)
class ApiProcess:
    url: str
    database_url: str
    proc: subprocess.Popen


@dataclass(frozen=True)
class TenantKey:
    tenant_id: uuid.UUID
    name: str
    key: str
    signing_secret: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


@contextmanager
def running_api(
    database_url: str, tmp_path_factory: pytest.TempPathFactory, **env: str
) -> Iterator[tuple[ApiProcess, Path]]:
    """A `kairos api` process on ``database_url`` (``env``: extra KAIROS_* settings), ready, and its log."""
    port = free_port()
    full = {
        **os.environ,
        "KAIROS_DATABASE_URL": database_url,
        "KAIROS_API_PORT": str(port),
        "KAIROS_HOME": str(tmp_path_factory.mktemp("home")),
        "KAIROS_LOG_FORMAT": "json",
        **env,
    }
    log_path = tmp_path_factory.mktemp("logs") / "api.log"
    with open(log_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "app.cli", "api"], env=full, stdout=out, stderr=subprocess.STDOUT
        )
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"kairos api exited: {log_path.read_text()[-2000:]}")
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(ready, timeout_s=30, what="kairos api /readyz")
        yield ApiProcess(url, database_url, proc), log_path
    finally:
        proc.terminate()
        proc.wait(timeout=15)


@pytest.fixture(scope="module")
def api(module_database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiProcess]:
    with running_api(module_database_url, tmp_path_factory) as (process, _log):
        yield process


def make_tenant(database_url: str, name: str | None = None) -> TenantKey:
    async def work() -> TenantKey:
        db = Database(create_engine(database_url, pool_size=1))
        try:
            created = await db.transaction(lambda c: c.tenants.create(name or f"t-{uuid.uuid4().hex[:8]}"))
            assert created is not None
            t, key = created
            return TenantKey(t.tenant_id, t.name, key, signing_secrets_of(t).current)
        finally:
            await db.close()

    return asyncio.run(work())


@pytest.fixture
def tenant(api: ApiProcess) -> TenantKey:
    return make_tenant(api.database_url)


@pytest.fixture
def other_tenant(api: ApiProcess) -> TenantKey:
    return make_tenant(api.database_url)


@pytest.fixture
def client(api: ApiProcess, tenant: TenantKey) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api.url, headers=tenant.headers, timeout=10) as c:
        yield c


def query(database_url: str, sql: str, params: dict | tuple = ()) -> list[tuple]:
    """Read the database directly (assertions only), with psycopg."""
    import psycopg

    with psycopg.connect(database_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []
