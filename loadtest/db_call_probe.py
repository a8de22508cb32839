"""Client CPU of the executor's two hot database calls, through Database.transaction and Database.statement.
Component probe (seeds rows, no tiers, one process): not the user's path; the figure that counts is loadtest/herd.py.

    .venv/bin/python loadtest/db_call_probe.py [--cycles 150] [--batch 128]

Creates its own database (on the embedded PostgreSQL under --home, or on KAIROS_DATABASE_URL's
server) with one tenant, one job and cycles x batch ready executions per round, then leases
``batch`` and completes them, ``cycles`` times: once with each call in a transaction at READ
COMMITTED (as the executor once ran them), once with each as one autocommit statement
(``Database.statement``), twice over, interleaved. Prints this process's CPU per cycle.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store import sealing  # noqa: E402
from app.store.db import Database, create_engine  # noqa: E402
from app.store.executions import Success  # noqa: E402
from loadtest.lease_bench import one_queue, scratch_database  # noqa: E402
from tests import factories as tf  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cycles", type=int, default=150, help="lease + complete cycles per round")
    p.add_argument("--batch", type=int, default=128, help="executions per lease and per completion")
    p.add_argument("--home", default="/tmp/kairos-db-call-probe", help="embedded PostgreSQL home")
    return p.parse_args()


async def main() -> None:
    args = parse()
    os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())
    with scratch_database(args.home, "db_call_probe") as url:
        db = Database(create_engine(url, pool_size=2))
        try:
            await probe(args, db)
        finally:
            await db.close()


async def probe(args: argparse.Namespace, db: Database) -> None:
    _, queue, job = await one_queue(db, "probe", "probe")
    n = args.cycles * args.batch
    print(f"{args.cycles} cycles of lease {args.batch} + complete {args.batch}, per round")
    for day, how in enumerate(("transaction", "statement", "transaction", "statement"), start=1):
        first = datetime.now(timezone.utc) - timedelta(days=day)
        await tf.insert_ready(db, [job] * n, [first + timedelta(microseconds=i) for i in range(n)])

        def call(work, how=how):
            return db.transaction(work, isolation="READ COMMITTED") if how == "transaction" else db.statement(work)

        cpu = time.process_time()
        for _ in range(args.cycles):
            leased = await call(lambda tx: tx.executions.lease(queue, "probe", args.batch, 60))
            done = [Success(e.execution_id, e.attempt) for e in leased]
            answers = await call(lambda tx, done=done: tx.executions.complete_many(done))
            if len(leased) != args.batch or not all(answers.values()):
                raise SystemExit(f"{how}: leased {len(leased)}, completed {sum(answers.values())}")
        per_cycle_us = 1e6 * (time.process_time() - cpu) / args.cycles
        print(
            f"  {how:11s} client CPU {per_cycle_us:6.0f} us per cycle "
            f"({per_cycle_us / args.batch:.1f} us per execution leased and completed)"
        )


if __name__ == "__main__":
    asyncio.run(main())
