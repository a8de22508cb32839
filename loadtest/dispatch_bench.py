"""Dispatch benchmark: N jobs due in the same second, one scheduler, how fast do they become ready?
Component probe (seeds rows / skips tiers): not the user's path; the figure that counts is loadtest/herd.py.

    .venv/bin/python loadtest/dispatch_bench.py [--jobs 20000] [--tenants 4] [--cron] [--subprocess]

Creates its own database (on the embedded PostgreSQL under --home, or on KAIROS_DATABASE_URL's
server), bulk-inserts the jobs with one statement per 5,000 (unnest), due all at the same instant
a few seconds ahead, runs one scheduler (in this process, or as a `kairos scheduler` subprocess),
waits until every job has its execution, and prints:
  throughput  executions / (last dispatched_at - first dispatched_at)
  lag         p50 / p99 / max of dispatched_at - ready_at (the scheduled run time)
dispatched_at is the dispatch transaction's start (database clock), ready_at the occurrence's run time.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.config import Settings
from app.domain.shards import shard_of
from app.scheduler.service import Scheduler
from app.store import embedded, migrate
from app.store.db import Database, create_engine
from tests import factories

SEED_CHUNK = 5000


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--jobs", type=int, default=20_000)
    p.add_argument("--tenants", type=int, default=4)
    p.add_argument(
        "--lead-s",
        type=float,
        default=10.0,
        help="seconds from the start of seeding to the due instant (room to seed and load)",
    )
    p.add_argument(
        "--cron", action="store_true", help="hourly cron jobs (a top-of-the-hour herd) instead of one-off jobs"
    )
    p.add_argument("--quota", type=int, default=1_000_000, help="tenants.max_dispatch_per_s of every tenant")
    p.add_argument("--subprocess", action="store_true", help="run `kairos scheduler` as a child process")
    p.add_argument(
        "--home", default="/tmp/kairos-bench", help="embedded PostgreSQL home (when KAIROS_DATABASE_URL is not set)"
    )
    p.add_argument("--keep", action="store_true", help="keep the benchmark database")
    return p.parse_args()


def server_url(home: str) -> str:
    if os.environ.get("KAIROS_DATABASE_URL"):
        return os.environ["KAIROS_DATABASE_URL"]
    return embedded.start(Path(home) / "pgdata")


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    head = base.rsplit("/", 1)[0]
    return f"{head}/{name}" + (f"?{query}" if query else "")


async def seed(db: Database, n: int, n_tenants: int, quota: int, at: datetime, cron: bool) -> None:
    tenant_ids = []
    for i in range(n_tenants):
        tenant, _ = await db.transaction(lambda tx, i=i: tx.tenants.create(f"bench-{i}"))
        await db.transaction(lambda tx, t=tenant: tx.tenants.set_quota(t.tenant_id, max_dispatch_per_s=quota))
        tenant_ids.append(tenant.tenant_id)
    jobs = []
    for i in range(n):
        job_id = uuid.uuid4()
        tenant = tenant_ids[i % n_tenants]
        jobs.append(
            factories.SeedJob(
                job_id=job_id,
                tenant_id=tenant,
                shard_id=shard_of(job_id),
                name=f"bench-{i}",
                pool="bench",
                queue=f"tenant:{tenant}:bench",
                schedule_kind="cron" if cron else "once",
                nominal_at=at,
                next_run_at=at,
                cron=f"{at.minute} * * * *" if cron else None,
                tz="UTC" if cron else None,
            )
        )
    for start in range(0, n, SEED_CHUNK):
        chunk = jobs[start : start + SEED_CHUNK]
        await factories.raw(db, lambda c: factories.seed_jobs(c, chunk))


def count(conn: psycopg.Connection) -> int:
    return conn.execute("SELECT count(*) FROM executions").fetchone()[0]


def report(conn: psycopg.Connection, n: int, elapsed_s: float) -> None:
    first, last, p50, p99, worst = conn.execute("""
        SELECT min(dispatched_at), max(dispatched_at),
               percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - ready_at)),
               percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM dispatched_at - ready_at)),
               max(extract(epoch FROM dispatched_at - ready_at))
        FROM executions""").fetchone()
    span = (last - first).total_seconds()
    print(f"executions      {n}")
    print(f"dispatch span   {span:.2f} s (first to last dispatched_at)")
    print(f"throughput      {n / span if span > 0 else float('inf'):,.0f} executions/s")
    print(f"lag p50         {float(p50):.3f} s")
    print(f"lag p99         {float(p99):.3f} s")
    print(f"lag max         {float(worst):.3f} s")
    print(f"all ready after {elapsed_s:.2f} s past the due instant (wall clock, includes polling)")


async def main() -> None:
    args = parse()
    base = server_url(args.home)
    name = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq(with_database(base, "postgres")), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    url = with_database(base, name)
    proc = None
    try:
        db = Database(create_engine(url, pool_size=4))
        await migrate.upgrade(db)
        due = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(seconds=args.lead_s)
        t0 = time.monotonic()
        await seed(db, args.jobs, args.tenants, args.quota, due, args.cron)
        print(
            f"seeded {args.jobs} {'cron' if args.cron else 'one-off'} jobs over {args.tenants} tenants "
            f"in {time.monotonic() - t0:.1f} s, all due at {due.isoformat()}"
        )
        settings = dataclasses.replace(Settings(), database_url=url)
        stop = asyncio.Event()
        if args.subprocess:
            env = dict(os.environ, KAIROS_DATABASE_URL=url, KAIROS_LOG_LEVEL="WARNING")
            script = Path(sys.executable).parent / "kairos"
            cmd = [str(script), "scheduler"]
            if not script.exists():
                cmd = [sys.executable, "-m", "app.cli", "scheduler"]
            proc = subprocess.Popen(cmd, env=env)
            task = None
        else:
            task = asyncio.create_task(Scheduler(db, settings).run(stop))
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            while count(conn) < args.jobs:
                if task is not None and task.done():
                    task.result()
                await asyncio.sleep(0.2)
            elapsed = (datetime.now(timezone.utc) - due).total_seconds()
            report(conn, args.jobs, elapsed)
        stop.set()
        if task is not None:
            await task
            print(f"tx retries      {db.retries} (40001/40P01 re-runs in the scheduler)")
        await db.close()
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=15)
        if not args.keep:
            with psycopg.connect(libpq(with_database(base, "postgres")), autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


if __name__ == "__main__":
    asyncio.run(main())
