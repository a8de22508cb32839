"""What an index on due_index costs the dispatch path: DispatchRecord timed with and without it.

    .venv/bin/python loadtest/due_index_cost.py [--scale 0.05] [--batch 500] [--rounds 10] [--blocks 6]
                                                [--index due_index_tenant_due] [--database-url URL]

Loads a lived database (``loadtest/lived.py``'s load, history in weekly partitions), then dispatches
its earliest due rows as the scheduler does, ``--batch`` at a time: in one transaction their due_index
rows are deleted (the claim) and ``DispatchRecord`` inserts their executions, each job's next
due_index row (six hours on) and advances the jobs. That statement is the one an index on due_index
makes dearer (one more entry per next occurrence it writes; the claim's delete touches no index).

The index is dropped and built again between blocks of ``--rounds`` rounds, the two arms interleaved
(with, without, without, with, ...) so the machine's drift falls on both. Prints per arm the
statement's median and p90 in milliseconds per batch, and the difference per occurrence.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from app.domain.states import ExecutionState, JobState  # noqa: E402
from app.store import Store, sealing  # noqa: E402
from app.store.db import Database, create_engine  # noqa: E402
from app.store.dispatch import JobAdvance, NewExecution, NextDue  # noqa: E402
from loadtest import lived  # noqa: E402
from loadtest.herd import Server, libpq  # noqa: E402

EARLIEST = """
SELECT d.shard_id, d.due_minute, d.next_run_at, d.job_id, d.tenant_id, d.nominal_at, j.queue, j.max_attempts
FROM due_index AS d JOIN jobs AS j ON j.job_id = d.job_id
ORDER BY d.next_run_at, d.job_id
LIMIT %s
"""
NEXT = timedelta(hours=6)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", type=float, default=0.05)
    p.add_argument("--batch", type=int, default=500, help="occurrences per DispatchRecord (the scheduler's batch)")
    p.add_argument("--rounds", type=int, default=10, help="batches per block")
    p.add_argument("--blocks", type=int, default=6, help="blocks per arm")
    p.add_argument("--index", default="due_index_tenant_due")
    p.add_argument("--database-url", default=None)
    p.add_argument("--seed", type=int, default=1)
    return p.parse_args()


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


async def one_round(db: Database, url: str, batch: int) -> float:
    """Dispatch the ``batch`` earliest due rows; the seconds DispatchRecord took."""
    with psycopg.connect(libpq(url), autocommit=True) as conn:
        rows = conn.execute(EARLIEST, (batch,)).fetchall()
    executions = [NewExecution(r[3], r[4], r[6], r[5], r[7], ExecutionState.READY, r[2]) for r in rows]
    nxt = [NextDue(r[0], r[1] + NEXT, r[2] + NEXT, r[3], r[4], r[5] + NEXT) for r in rows]
    advances = [JobAdvance(r[3], JobState.ACTIVE, r[5] + NEXT, r[2] + NEXT) for r in rows]
    took = 0.0

    async def work(tx: Store) -> None:
        nonlocal took
        from sqlalchemy import text

        await tx.schema._conn.execute(
            text("DELETE FROM due_index WHERE job_id = ANY(CAST(:ids AS UUID[]))"),
            {"ids": "{" + ",".join(str(r[3]) for r in rows) + "}"},
        )
        t0 = time.perf_counter()
        await tx.dispatch.record(executions, nxt, advances)
        took = time.perf_counter() - t0

    await db.transaction(work)
    return took


async def main(args: argparse.Namespace) -> int:
    import os

    os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())
    tmp = Path(tempfile.mkdtemp(prefix="kairos-due-cost-"))
    server = Server(argparse.Namespace(database_url=args.database_url, keep=False), tmp)
    try:
        url = server.create("duecost")
        load_args = argparse.Namespace(scale=args.scale, attempts="failed", seed=args.seed)
        loaded = await lived.load(url, load_args)
        print(f"loaded {loaded.rows} in {loaded.seconds['total']} s", flush=True)
        definition = f"CREATE INDEX {args.index} ON due_index (tenant_id, due_minute)"
        with psycopg.connect(libpq(url), autocommit=True) as conn:
            row = conn.execute("SELECT pg_get_indexdef(to_regclass(%s))", (args.index,)).fetchone()
            if row and row[0]:
                definition = row[0]
        db = Database(create_engine(url, pool_size=2))
        times: dict[str, list[float]] = {"with": [], "without": []}
        try:
            await one_round(db, url, args.batch)  # warm
            for b in range(2 * args.blocks):
                arm = ("with", "without", "without", "with")[b % 4]
                with psycopg.connect(libpq(url), autocommit=True) as conn:
                    conn.execute(f"DROP INDEX IF EXISTS {args.index}")
                    if arm == "with":
                        conn.execute(definition)
                    conn.execute("VACUUM ANALYZE due_index")
                for _ in range(args.rounds):
                    times[arm].append(await one_round(db, url, args.batch))
        finally:
            await db.close()
        out: dict[str, Any] = {}
        for arm, ts in times.items():
            ms = [t * 1000 for t in ts]
            out[arm] = statistics.median(ms)
            print(
                f"DispatchRecord of {args.batch}, {arm} {args.index}: median {statistics.median(ms):.2f} ms, "
                f"p90 {pct(ms, 0.9):.2f} ms over {len(ms)} batches",
                flush=True,
            )
        extra = out["with"] - out["without"]
        print(
            f"difference: {extra:+.2f} ms per batch, {extra * 1000 / args.batch:+.1f} us per occurrence "
            f"({100 * extra / out['without']:+.1f} %)"
        )
        return 0
    finally:
        server.close()


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
