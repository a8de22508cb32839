"""Process helpers for chaos tests: real `kairos scheduler` processes on the test database.

Each process logs JSON lines to its own file, so a test can read what it did (shards gained and
lost, batches refused by the fence) after killing, pausing or stopping it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from uuid import UUID

import psutil
import pytest
from sqlalchemy import text

from app.domain.shards import shard_of
from app.store.db import Database
from tests import factories


def scheduler_command() -> list[str]:
    """`kairos scheduler` from the current environment (the venv's console script when installed)."""
    script = Path(sys.executable).parent / "kairos"
    return [str(script), "scheduler"] if script.exists() else [sys.executable, "-m", "app.cli", "scheduler"]


@dataclass
class SchedulerProcess:
    name: str
    proc: subprocess.Popen
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def terminate(self, timeout_s: float = 10.0) -> int:
        """SIGTERM (graceful) and wait; returns the exit code."""
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout_s)

    def logs(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"msg": line})
        return out

    def owner(self) -> str | None:
        for record in self.logs():
            if record.get("msg") == "scheduler starting":
                return record.get("owner")
        return None


@pytest.fixture
def spawn_scheduler(database_url: str, tmp_path: Path) -> Iterator[Callable[..., SchedulerProcess]]:
    started: list[SchedulerProcess] = []

    def spawn(name: str, **env_overrides: str) -> SchedulerProcess:
        env = dict(os.environ)
        env.update(
            {
                "KAIROS_DATABASE_URL": database_url,
                "KAIROS_HOME": str(tmp_path / "home"),
                "KAIROS_LOG_FORMAT": "json",
                "KAIROS_LOG_LEVEL": "INFO",
                "KAIROS_LEASE_TTL_S": "3",
                "KAIROS_LOADER_INTERVAL_S": "1",
                "KAIROS_DB_POOL_SIZE": "4",
            }
        )
        env.update(env_overrides)
        log_path = tmp_path / f"{name}.log"
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                scheduler_command(),
                env=env,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=Path(__file__).resolve().parents[2],
            )
        started.append(SchedulerProcess(name, proc, log_path))
        return started[-1]

    yield spawn
    for p in started:
        if p.alive():
            p.signal(signal.SIGCONT)
            p.signal(signal.SIGKILL)
            p.proc.wait(timeout=10)


async def query(db: Database, sql: str, **params) -> list:
    async def read(conn):
        return (await conn.execute(text(sql), params)).all()

    return await factories.raw(db, read, isolation="READ COMMITTED")


async def owners(db: Database) -> dict[int, str | None]:
    """shard_id -> owner of every shard whose lease is live (database clock)."""
    got = await query(db, "SELECT shard_id, CASE WHEN lease_until > now() THEN owner END AS owner FROM shard_leases")
    return {r.shard_id: r.owner for r in got}


async def new_tenants(db: Database, n: int) -> list[UUID]:
    out = []
    for _ in range(n):
        tenant, _ = await db.transaction(lambda c: c.tenants.create(f"chaos-{uuid.uuid4().hex[:8]}"))
        out.append(tenant.tenant_id)
    return out


async def seed_spread(
    db: Database,
    tenant_ids: list[UUID],
    n: int,
    first: datetime,
    span_s: float,
    *,
    cron: str | None = None,
    cron_minutes_ahead: int = 1,
) -> list[UUID]:
    """n jobs, due evenly over [first, first + span_s], round-robin over the tenants.

    Cron jobs (every minute) are first due ``cron_minutes_ahead`` minute boundaries after ``first``
    (0: the boundary just before it).
    """
    jobs = []
    for i in range(n):
        job_id = uuid.uuid4()
        tenant = tenant_ids[i % len(tenant_ids)]
        at = first + timedelta(seconds=span_s * i / max(1, n))
        if cron:
            at = at.replace(second=0, microsecond=0) + timedelta(minutes=cron_minutes_ahead)
        jobs.append(
            factories.SeedJob(
                job_id=job_id,
                tenant_id=tenant,
                shard_id=shard_of(job_id),
                name=f"chaos-{i}",
                pool="work",
                queue=factories.tenant_queue(tenant, "work"),
                schedule_kind="cron" if cron else "once",
                nominal_at=at,
                next_run_at=at,
                cron=cron,
                tz="UTC" if cron else None,
            )
        )
    for start in range(0, len(jobs), 5000):
        chunk = jobs[start : start + 5000]
        await factories.raw(db, lambda c: factories.seed_jobs(c, chunk))
    return [j.job_id for j in jobs]


def left_running(directory: str) -> list[str]:
    """Processes started in a drill's directory (their cwd, even deleted) or naming it (PostgreSQL's -D,
    a worker's --runs)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        info = proc.info
        if directory in (info.get("cwd") or "") or any(directory in part for part in info.get("cmdline") or ()):
            found.append(f"{info['pid']} {' '.join(info.get('cmdline') or ())}")
    return found
