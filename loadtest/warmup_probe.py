"""PostgreSQL's CPU for a new connection's first leases and completions, by when psycopg prepares them.
Component probe (seeds rows, no tiers, one process): not the user's path; the figure that counts is loadtest/herd.py.

    .venv/bin/python loadtest/warmup_probe.py [--pairs 40] [--batch 16] [--rounds 3] [--rows 20000]

Creates its own database (on the embedded PostgreSQL under --home, or on KAIROS_DATABASE_URL's
server, which must run on this machine) with one queue of ready executions, then, per round, opens
one new connection for each setting of psycopg's ``prepare_threshold`` (interleaved) and runs
``--pairs`` lease ``--batch`` + completion pairs on it through ``Database.statement``, as an
executor's fresh connection does at the start of a burst. Prints the backend's CPU for the first
pairs one by one and for all of them: what a connection costs until its plans are warm.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.store import sealing  # noqa: E402
from app.store.db import Database, create_engine  # noqa: E402
from app.store.executions import Success  # noqa: E402
from loadtest.lease_bench import one_queue, scratch_database  # noqa: E402
from loadtest.pg_cost_probe import Backends  # noqa: E402
from tests import factories as tf  # noqa: E402

SHOWN = 8  # pairs printed one by one


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--pairs", type=int, default=40, help="lease + completion pairs per connection")
    p.add_argument("--batch", type=int, default=16, help="executions per lease")
    p.add_argument("--rounds", type=int, default=3, help="connections per setting, interleaved")
    p.add_argument(
        "--rows",
        type=int,
        default=20_000,
        help="ready executions seeded (more, with the leased ones behind them, make each plan dearer)",
    )
    p.add_argument("--home", default="/tmp/kairos-warmup-probe", help="embedded PostgreSQL home")
    return p.parse_args()


async def pairs_on_a_new_connection(
    url: str, queue: str, backends: Backends, args: argparse.Namespace, threshold: int
) -> list[float]:
    """Backend CPU (ms) of each lease + completion pair on one new connection prepared at use ``threshold``."""
    db = Database(create_engine(url, pool_size=1))  # its statement pool keeps one connection: every call finds it
    out = []
    try:
        async with (await db._direct_pool()).connection() as conn:  # nothing run on it yet
            conn.prepare_threshold = threshold
        for _ in range(args.pairs):
            before = backends.cpu_s()
            leased = await db.statement(lambda tx: tx.executions.lease(queue, "probe", args.batch, 60))
            done = [Success(e.execution_id, e.attempt) for e in leased]
            await db.statement(lambda tx, done=done: tx.executions.complete_many(done))
            out.append(1e3 * (backends.cpu_s() - before))
    finally:
        await db.close()
    return out


async def main() -> None:
    args = parse()
    os.environ.setdefault(sealing.SECRET_KEY_VARIABLE, sealing.new_key())
    with scratch_database(args.home, "warmup_probe") as url:
        seed = Database(create_engine(url, pool_size=2))
        try:
            _, queue, job = await one_queue(seed, "probe", "probe")
            rows = max(args.rows, 2 * args.rounds * args.pairs * args.batch)
            first = datetime.now(timezone.utc) - timedelta(days=1)
            await tf.insert_ready(seed, [job] * rows, [first + timedelta(microseconds=i) for i in range(rows)])
            await seed.transaction(lambda tx: tx.planner_statistics.analyze("executions"))
        finally:
            await seed.close()
        backends = Backends(url)
        try:
            for n in range(1, args.rounds + 1):
                for threshold, label in ((5, "psycopg's default (5th use)"), (0, "at first use (Kairos)")):
                    ms = await pairs_on_a_new_connection(url, queue, backends, args, threshold)
                    steady = ms[len(ms) // 2 :]
                    print(
                        f"round {n}, prepared {label:28}: {sum(ms):6.1f} ms for {len(ms)} pairs "
                        f"(steady {sum(steady) / len(steady):.2f} ms a pair); first pairs "
                        + " ".join(f"{x:.1f}" for x in ms[:SHOWN])
                    )
        finally:
            backends.close()


if __name__ == "__main__":
    asyncio.run(main())
