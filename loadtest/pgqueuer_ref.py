"""pgqueuer, the reference arm of the worker-pool herds: a plain Postgres queue on the same server, same hour.

Runs in a virtualenv of its own (``loadtest/reference.py`` makes it: pgqueuer pins its own driver versions),
so it imports nothing of Kairos. Three roles, one per process:

    python pgqueuer_ref.py install DSN
    python pgqueuer_ref.py enqueue DSN T GROUPS_JSON      # [[group, jobs], ...], every job due at epoch T
    python pgqueuer_ref.py worker DSN OUT BATCH N          # appends "<start epoch s> <group>" lines to OUT

A worker runs pgqueuer's QueueManager with ``batch_size`` BATCH; its handler does nothing but note when it
started and the job's group, and the worker exits once N starts are noted across all workers (by counting
the lines of every OUT file in OUT's folder).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

import asyncpg
import uvloop
from pgqueuer import AsyncpgDriver, Queries, QueueManager

ENTRYPOINT = "herd"


async def install(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await Queries(AsyncpgDriver(conn)).install()
    finally:
        await conn.close()


async def enqueue(dsn: str, t_due: float, groups: list[tuple[str, int]]) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        queries = Queries(AsyncpgDriver(conn))
        payloads = [g.encode() for g, n in groups for _ in range(n)]
        for i in range(0, len(payloads), 1000):
            chunk = payloads[i : i + 1000]
            after = timedelta(seconds=max(0.0, t_due - time.time()))
            await queries.enqueue(
                [ENTRYPOINT] * len(chunk), list(chunk), [0] * len(chunk), execute_after=[after] * len(chunk)
            )
    finally:
        await conn.close()


async def worker(dsn: str, out: Path, batch: int, total: int) -> None:
    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    lines: list[str] = []

    @qm.entrypoint(ENTRYPOINT)
    async def handle(job) -> None:
        lines.append(f"{time.time():.6f} {job.payload.decode() if job.payload else '-'}\n")

    async def watch() -> None:
        while True:
            await asyncio.sleep(0.25)
            with out.open("a") as f:
                f.writelines(lines)
            lines.clear()
            done = sum(sum(1 for _ in p.open()) for p in out.parent.glob("starts-*.txt"))
            if done >= total:
                qm.shutdown.set()
                return

    watcher = asyncio.create_task(watch())
    await qm.run(batch_size=batch, dequeue_timeout=timedelta(seconds=0.5))
    await watcher
    await conn.close()


def main(argv: list[str]) -> None:
    role, dsn = argv[0], argv[1]
    if role == "install":
        asyncio.run(install(dsn))
    elif role == "enqueue":
        asyncio.run(enqueue(dsn, float(argv[2]), [(g, int(n)) for g, n in json.loads(argv[3])]))
    elif role == "worker":
        uvloop.run(worker(dsn, Path(argv[2]), int(argv[3]), int(argv[4])))  # as pgqueuer's own CLI runs it
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
