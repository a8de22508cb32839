"""Submit latency of critical and normal tenants against a primary with a synchronous standby.
Component probe (the submit writer in this process, no API tier): it measures what
synchronous_commit = remote_apply costs one submit transaction, not the REST API's figures.

    .venv/bin/python loadtest/durability_probe.py [--submits 300] [--warmup 30]

Starts a PostgreSQL 15 primary and a streaming standby on this machine (app/drill/cluster.py, the
binaries under /usr/lib/postgresql/15/bin or --pg-bin), synchronous (synchronous_standby_names
names the standby), migrates the primary, and makes two tenants: `critical` (kairos tenants
set-critical critical on) and `normal`. The Kairos role's transactions commit locally by default
(ALTER ROLE ... SET synchronous_commit = local, the per-tenant deployment of docs/durability.md), so
`normal` is a local commit and `critical` waits until the standby has applied it. For each tenant,
one submit at a time through app.api.jobs.submit.SubmitWriter (the API's own write path: one
transaction per submit at this rate), it prints p50/p99/max in milliseconds; a third line is
`synchronous_commit = on` for every tenant (the whole installation waiting for the standby's flush),
for comparison. Both servers share this machine's disk and CPU, so the gap is the round trip to the
standby and its replay, without network latency between regions (add yours: a remote_apply commit
waits at least one round trip to the standby).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sqlalchemy import text  # noqa: E402

from app.api.jobs import schemas, service  # noqa: E402
from app.api.jobs.submit import Created, SubmitWriter  # noqa: E402
from app.config import Settings  # noqa: E402
from app.drill.cluster import PG_BIN_DEFAULT, start_pair  # noqa: E402
from app.store import Database, migrate  # noqa: E402
from app.store.db import create_engine  # noqa: E402
from tests import factories  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--submits", type=int, default=300, help="measured submits per line")
    p.add_argument("--warmup", type=int, default=30, help="submits per line before measuring")
    p.add_argument("--pg-bin", type=Path, default=PG_BIN_DEFAULT, help="PostgreSQL 15 binaries")
    return p.parse_args()


def submission(tenant_id: uuid.UUID) -> Any:
    body = schemas.JobIn(
        name="probe",
        target=schemas.TargetIn(type="queue", ref="probe"),
        schedule=schemas.ScheduleIn(delay_seconds=3600),
        payload={"n": 1},
    )
    return service.submission(body, Settings(), tenant_id, None, None, datetime.now(timezone.utc))


async def latencies(writer: SubmitWriter, tenant_id: uuid.UUID, n: int, warmup: int) -> list[float]:
    out: list[float] = []
    for i in range(warmup + n):
        started = time.perf_counter()
        [outcome] = await writer.submit([submission(tenant_id)])
        elapsed = (time.perf_counter() - started) * 1000
        if not isinstance(outcome, Created):
            raise SystemExit(f"submit failed: {outcome!r}")
        if i >= warmup:
            out.append(elapsed)
    return out


def line(label: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return f"{label:<44} n={len(ms):<5} p50={q[49]:7.2f} ms  p99={q[98]:7.2f} ms  max={max(ms):7.2f} ms"


async def main(args: argparse.Namespace) -> None:
    cluster, primary, standby = await start_pair(synchronous=True, pg_bin=args.pg_bin)
    try:
        setup = Database(create_engine(primary.url(), pool_size=1))
        await migrate.upgrade(setup)
        critical, normal = await factories.tenant(setup, "critical"), await factories.tenant(setup, "normal")
        await setup.transaction(lambda tx: tx.durability.set_critical(critical.tenant_id, True))

        async def commit_default(conn: Any, *, mode: str) -> None:  # the deployment's choice, not Kairos's
            await conn.execute(text(f"ALTER ROLE postgres SET synchronous_commit = {mode}"))

        results: list[str] = []
        for mode, runs in (
            ("local", (("critical (remote_apply)", critical), ("normal (local)", normal))),
            ("on", (("normal, every commit synchronous (on)", normal),)),
        ):
            await factories.raw(setup, lambda conn, m=mode: commit_default(conn, mode=m))
            db = Database(create_engine(primary.url(), pool_size=4))  # new sessions take the role default
            writer = SubmitWriter(db)
            for label, tenant in runs:
                results.append(line(label, await latencies(writer, tenant.tenant_id, args.submits, args.warmup)))
            await writer.close()
            await db.close()
        await setup.close()
        state = await primary.standby("standby")
        print(f"primary :{primary.port} -> synchronous standby :{standby.port} ({state.sync_state if state else '?'})")
        for r in results:
            print(r)
    finally:
        cluster.close()


if __name__ == "__main__":
    asyncio.run(main(parse()))
