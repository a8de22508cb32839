"""PostgreSQL's CPU per execution leased and completed, by the number of leasers of one queue.
Component probe (seeds rows, no tiers, one process): not the user's path; the figure that counts is loadtest/herd.py.

    .venv/bin/python loadtest/pg_cost_probe.py [--rows 60000] [--batch 128] [--leasers 1,2,4] [--by-id] [--tenants 1]
                                               [--held 0]

Creates its own database (on the embedded PostgreSQL under --home, or on KAIROS_DATABASE_URL's
server, which must run on this machine: the figures are the server processes' own CPU time from
/proc/<pid>/schedstat) with --tenants tenants (one job each, all on one queue, as the herd's shared
pool) and --rows ready executions per round spread evenly over them, then drains
them with N concurrent leasers, each repeating lease --batch + complete them through
``Database.statement`` as the executor does. Prints the backends' CPU per execution; with one
leaser, split into the lease and the completion. ``--held B`` keeps each leaser's last B batches
leased (completing the oldest), so the tenants' in-flight counts are as deep as in a herd's drain.

``--by-id`` adds a one-leaser round whose lease is the statement an in-memory ready queue would run
(the issue's "ready queues that are not a search": the executor knows the ids, PostgreSQL only
flips them), so the search's share of the fair lease reads as the difference between the two rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store import sealing  # noqa: E402
from app.store.db import Database, create_engine  # noqa: E402
from app.store.executions import Success  # noqa: E402
from loadtest.lease_bench import libpq, one_queue, scratch_database  # noqa: E402
from tests import factories as tf  # noqa: E402

# The lease of executions whose ids the caller holds (no search, no fairness, no quota): what is left
# of ExecutionLeaseFair when the picking is done in memory. For this probe only.
LEASE_BY_ID = text("""
UPDATE executions AS e SET
    state = 'leased', attempt = e.attempt + 1, lease_owner = :worker_id, started_at = c.now,
    lease_until = c.now + least(CAST(:lease_s AS FLOAT8), CAST(j.timeout_s AS FLOAT8)) * INTERVAL '1 second'
FROM jobs AS j, (SELECT now() AS now) AS c
WHERE e.execution_id = ANY (CAST(:ids AS UUID[])) AND e.state = 'ready' AND j.job_id = e.job_id
RETURNING e.execution_id, e.job_id, e.tenant_id, e.attempt, e.max_attempts, e.scheduled_for, e.lease_until,
          coalesce(e.payload, j.payload) AS payload, j.target_type, j.target_ref, j.timeout_s""")


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", type=int, default=60_000, help="ready executions per round")
    p.add_argument("--batch", type=int, default=128, help="executions per lease and per completion")
    p.add_argument("--leasers", default="1,2,4", help="concurrent leasers, one round each")
    p.add_argument("--by-id", action="store_true", help="add a one-leaser round that leases by id (LEASE_BY_ID)")
    p.add_argument("--tenants", type=int, default=1, help="tenants whose jobs share the queue (rows spread evenly)")
    p.add_argument(
        "--held",
        type=int,
        default=0,
        help="batches each leaser holds leased before completing its oldest (a herd keeps about a "
        "thousand executions in flight: 4 leasers x 2 batches of 128)",
    )
    p.add_argument("--home", default="/tmp/kairos-pg-cost-probe", help="embedded PostgreSQL home")
    return p.parse_args()


class Backends:
    """CPU time of the client backends serving one database (autovacuum's workers, which come and go, not
    counted), this probe's own connection left out."""

    def __init__(self, url: str) -> None:
        self._admin = psycopg.connect(libpq(url), autocommit=True)
        self._name = self._admin.info.dbname
        try:  # this connection's own backend must be a process here, or every figure would read 0
            with open(f"/proc/{self._admin.info.backend_pid}/cmdline", "rb") as f:
                local = b"postgres" in f.read()
        except OSError:
            local = False
        if not local:
            self._admin.close()
            raise SystemExit("needs the PostgreSQL server on this machine and Linux's /proc/<pid>/schedstat")

    def cpu_s(self) -> float:
        pids = [
            pid
            for (pid,) in self._admin.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = %s AND backend_type = 'client backend' "
                "AND pid <> pg_backend_pid()",
                (self._name,),
            )
        ]
        total = 0
        for pid in pids:
            with contextlib.suppress(FileNotFoundError):  # a backend that has just exited
                with open(f"/proc/{pid}/schedstat") as f:
                    total += int(f.read().split()[0])  # nanoseconds on a CPU
        return total / 1e9

    def close(self) -> None:
        self._admin.close()


async def main() -> None:
    args = parse()
    os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())
    with scratch_database(args.home, "pg_cost_probe") as url:
        leasers = [int(n) for n in args.leasers.split(",")]
        db = Database(create_engine(url, pool_size=2 + max(leasers)))
        backends = Backends(url)
        try:
            _, queue, job = await one_queue(db, "probe", "probe")
            jobs = [job]
            for n in range(1, args.tenants):  # more tenants' jobs on the same queue
                tenant = await tf.tenant(db, f"probe-{n}")
                await db.transaction(lambda tx, t=tenant: tx.tenants.set_quota(t.tenant_id, max_inflight=1_000_000))
                jobs.append(await tf.job(db, tenant.tenant_id, queue=queue))
            rounds: list[tuple[int, bool]] = [(n, False) for n in leasers] + ([(1, True)] if args.by_id else [])
            for day, (n, by_id) in enumerate(rounds, start=1):
                first = datetime.now(timezone.utc) - timedelta(days=day)
                times = [first + timedelta(microseconds=i) for i in range(args.rows)]
                ids = await tf.insert_ready(db, [jobs[i % len(jobs)] for i in range(args.rows)], times)
                await db.transaction(lambda tx: tx.planner_statistics.analyze("executions"))
                await drain(args, db, backends, queue, n, ids if by_id else None)
        finally:
            backends.close()
            await db.close()


async def lease_by_id(db: Database, ids: list[Any]) -> list[tuple[Any, int]]:
    # One statement on the executor's own path (Database.statement: no BEGIN/COMMIT), through the Table's
    # connection: the store has no public way to run a statement that is not in its catalogue.
    async def run(tx: Any) -> list[tuple[Any, int]]:
        rows = await tx.executions._conn.execute(LEASE_BY_ID, {"ids": ids, "worker_id": "probe", "lease_s": 60.0})
        return [(r.execution_id, r.attempt) for r in rows]

    return await db.statement(run) if ids else []


async def drain(
    args: argparse.Namespace, db: Database, backends: Backends, queue: str, leasers: int, by_id: list[Any] | None = None
) -> None:
    """Lease (fairly, or by_id's ids in order) and complete until nothing is left."""
    split = {"lease": 0.0, "complete": 0.0}
    done = 0
    chunks = iter([by_id[i : i + args.batch] for i in range(0, len(by_id), args.batch)] if by_id else [])

    async def complete(leased: list[tuple[Any, int]]) -> None:
        items = [Success(execution_id, attempt) for execution_id, attempt in leased]
        answers = await db.statement(lambda tx: tx.executions.complete_many(items))
        if not all(answers.get(i.execution_id) for i in items):
            raise SystemExit(f"completed {sum(map(bool, answers.values()))} of {len(items)}")

    async def leaser() -> None:
        nonlocal done
        held: list[list[tuple[Any, int]]] = []  # leased batches not completed yet, oldest first
        while True:
            before = backends.cpu_s() if leasers == 1 else 0.0
            if by_id is None:
                leased = [
                    (e.execution_id, e.attempt)
                    for e in await db.statement(lambda tx: tx.executions.lease(queue, "probe", args.batch, 60))
                ]
            else:
                leased = await lease_by_id(db, next(chunks, []))
            if not leased:
                for batch in held:
                    await complete(batch)
                return
            middle = backends.cpu_s() if leasers == 1 else 0.0
            held.append(leased)
            if len(held) > args.held:
                await complete(held.pop(0))
            if leasers == 1:
                split["lease"] += middle - before
                split["complete"] += backends.cpu_s() - middle
            done += len(leased)

    start = backends.cpu_s()
    await asyncio.gather(*(leaser() for _ in range(leasers)))
    per_row_us = 1e6 * (backends.cpu_s() - start) / max(done, 1)
    how = "lease by id" if by_id is not None else "fair lease"
    line = f"{leasers} leaser(s), {how}, batch {args.batch}: {done} executions, PostgreSQL {per_row_us:5.1f} us each"
    if leasers == 1:
        line += f" (lease {1e6 * split['lease'] / done:.1f} us, completion {1e6 * split['complete'] / done:.1f} us)"
    print(line)


if __name__ == "__main__":
    asyncio.run(main())
