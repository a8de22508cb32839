"""Lease + complete benchmark: N ready executions, one executor, then 1 and then 2 worker processes.
Component probe (seeds rows / skips tiers): not the user's path; the figure that counts is loadtest/herd.py.

    .venv/bin/python loadtest/lease_bench.py [--executions 20000] [--concurrency 256] [--batch 128]

Creates its own database (on the embedded PostgreSQL under --home, or on KAIROS_DATABASE_URL's
server), bulk-inserts N ready executions of one tenant's pool with one unnest statement per
phase, starts `kairos executor` as a subprocess, then runs the phases: 1 worker process, then 2
(each a ``kairos_sdk.Worker`` whose handler returns at once, so the figure is the protocol and
database cost: Lease, then the SDK's buffered outcomes, one CompleteMany call per few
milliseconds of finished executions). For each phase it prints
  throughput  executions / (last finished_at - first leased_at), both from the database clock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store import embedded, migrate, sealing  # noqa: E402
from app.store.db import Database, create_engine  # noqa: E402
from tests import factories as tf  # noqa: E402

POOL = "bench"


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--executions", type=int, default=20_000)
    p.add_argument("--concurrency", type=int, default=256, help="handlers in flight per worker process")
    p.add_argument("--batch", type=int, default=128, help="executions per Lease call")
    p.add_argument("--phases", default="1,2", help="worker processes per phase")
    p.add_argument("--home", default="/tmp/kairos-lease-bench", help="embedded PostgreSQL home")
    p.add_argument("--keep", action="store_true", help="keep the benchmark database")
    p.add_argument("--worker", nargs=3, metavar=("ADDR", "KEY", "ARGS"), help=argparse.SUPPRESS)
    return p.parse_args()


def libpq(url: str) -> str:
    return url.replace("postgresql+psycopg://", "postgresql://")


def with_database(url: str, name: str) -> str:
    base, _, query = url.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}" + (f"?{query}" if query else "")


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_worker(addr: str, key: str, args: str) -> None:
    """Child mode: one SDK worker whose handler does nothing."""
    from kairos_sdk import Worker

    concurrency, batch = (int(x) for x in args.split(","))

    async def handler(_execution) -> None:
        return None

    Worker(
        POOL, handler, addr=addr, api_key=key, concurrency=concurrency, batch=batch, wait_seconds=1, lease_seconds=60
    ).run_forever()


async def seed(db: Database, job_id: uuid.UUID, n: int, phase: int) -> None:
    base = datetime.now(timezone.utc) - timedelta(days=phase + 1)
    await tf.insert_ready(db, [job_id] * n, [base + timedelta(milliseconds=i) for i in range(n)])


def measure(conn: psycopg.Connection, since: datetime) -> tuple[int, float]:
    n, first, last = conn.execute(
        "SELECT count(*), min(a.leased_at), max(a.finished_at) FROM attempts AS a "
        "WHERE a.outcome = 'succeeded' AND a.leased_at >= %s",
        (since,),
    ).fetchone()
    return n, (last - first).total_seconds()


@contextlib.contextmanager
def scratch_database(home: str, prefix: str, *, keep: bool = False) -> Iterator[str]:
    """The URL of a new database on KAIROS_DATABASE_URL's server, else on the embedded PostgreSQL under
    ``home``; dropped afterwards unless ``keep``. (Also loadtest/db_call_probe.py's.)"""
    base = os.environ.get("KAIROS_DATABASE_URL") or embedded.start(Path(home) / "pgdata")
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(libpq(with_database(base, "postgres")), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    try:
        yield with_database(base, name)
    finally:
        if not keep:
            with psycopg.connect(libpq(with_database(base, "postgres")), autocommit=True) as admin:
                admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def one_queue(db: Database, tenant_name: str, pool: str) -> tuple[tf.TenantFixture, str, uuid.UUID]:
    """Migrate ``db``; one tenant (its in-flight quota out of the way), its ``pool``'s queue, one job on it."""
    await migrate.upgrade(db)
    tenant = await tf.tenant(db, tenant_name)
    await db.transaction(lambda tx: tx.tenants.set_quota(tenant.tenant_id, max_inflight=1_000_000))
    queue = tf.tenant_queue(tenant.tenant_id, pool)
    return tenant, queue, await tf.job(db, tenant.tenant_id, queue=queue)


async def main() -> None:
    args = parse()
    # The executor must open the signing secret the bench tenant is sealed with (app.store.sealing).
    os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())
    with scratch_database(args.home, "lease_bench", keep=args.keep) as url:
        await bench(args, url)


async def bench(args: argparse.Namespace, url: str) -> None:
    db = Database(create_engine(url, pool_size=2))
    executor = None
    try:
        tenant, _, job = await one_queue(db, "bench", POOL)
        port = free_port()
        env = dict(
            os.environ,
            KAIROS_DATABASE_URL=url,
            KAIROS_GRPC_PORT=str(port),
            KAIROS_LOG_LEVEL="WARNING",
            KAIROS_HOME=str(Path(args.home) / "home"),
        )
        executor = subprocess.Popen([sys.executable, "-m", "app.cli", "executor"], cwd=ROOT, env=env)
        addr = f"127.0.0.1:{port}"
        print(
            f"executions per phase {args.executions}; worker concurrency {args.concurrency}, "
            f"lease batch {args.batch}; executor on {addr}; cpus {os.cpu_count()}"
        )
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            for phase, processes in enumerate(int(p) for p in args.phases.split(",")):
                t0 = time.monotonic()
                await seed(db, job, args.executions, phase)
                print(f"phase {phase + 1}: seeded {args.executions} ready executions in {time.monotonic() - t0:.1f} s")
                since = conn.execute("SELECT now()").fetchone()[0]
                workers = [
                    subprocess.Popen(
                        [
                            sys.executable,
                            str(Path(__file__).resolve()),
                            "--worker",
                            addr,
                            tenant.key,
                            f"{args.concurrency},{args.batch}",
                        ],
                        cwd=ROOT,
                        env=env,
                    )
                    for _ in range(processes)
                ]
                deadline = time.monotonic() + 600
                while True:
                    left = conn.execute("SELECT count(*) FROM executions WHERE state <> 'succeeded'").fetchone()[0]
                    if left == 0:
                        break
                    if time.monotonic() > deadline or any(w.poll() is not None for w in workers):
                        raise SystemExit(f"phase {phase + 1} did not finish ({left} left)")
                    time.sleep(0.2)
                for w in workers:
                    w.send_signal(signal.SIGTERM)
                for w in workers:
                    w.wait(timeout=30)
                n, span = measure(conn, since)
                print(
                    f"  {processes} worker process{'es' if processes > 1 else ''}: {n} leased+completed in "
                    f"{span:.2f} s = {n / span:,.0f} executions/s"
                )
    finally:
        if executor is not None:
            executor.send_signal(signal.SIGTERM)
            executor.wait(timeout=30)
        await db.close()


if __name__ == "__main__":
    if "--worker" in sys.argv:
        run_worker(*parse().worker)
    else:
        asyncio.run(main())
