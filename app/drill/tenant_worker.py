"""The drills' tenant side: an SDK worker (``kairos_sdk.Worker``) that records every run it starts.

``python -m app.drill.tenant_worker --pool POOL --addr HOST:PORT --runs FILE`` with KAIROS_API_KEY set.
Its handler appends one JSON line per run to FILE with a single ``write`` on an O_APPEND descriptor
(so a SIGKILL never leaves half a line, and nothing sits in a buffer), then works for ``--work-s``.
A run is recorded before its outcome is reported: an occurrence with two lines ran twice (a lost
lease, a worker killed or stalled after it started), which is what the drill counts as duplicated.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time

from app import observability
from kairos_sdk import Worker
from kairos_sdk.client import Execution


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m app.drill.tenant_worker")
    parser.add_argument("--pool", required=True)
    parser.add_argument("--addr", required=True)
    parser.add_argument("--runs", required=True, help="file each run is appended to (JSON lines)")
    parser.add_argument("--worker-id", required=True)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--lease-seconds", type=float, default=10.0)
    parser.add_argument("--work-s", type=float, default=0.0, help="how long each run works")
    args = parser.parse_args(argv)
    observability.setup_logging("INFO", "json", "worker")
    fd = os.open(args.runs, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    work_s: float = args.work_s

    async def handler(execution: Execution) -> None:
        line = {
            "job": execution.job_id,
            "at": execution.scheduled_for.timestamp(),
            "attempt": execution.attempt,
            "execution": execution.execution_id,
            "worker": args.worker_id,
            "started": time.time(),
        }
        os.write(fd, (json.dumps(line) + "\n").encode())
        if work_s:
            await asyncio.sleep(work_s)

    Worker(
        args.pool,
        handler,
        addr=args.addr,
        concurrency=args.concurrency,
        lease_seconds=args.lease_seconds,
        wait_seconds=1.0,
        worker_id=args.worker_id,
        grace_s=1.0,
        idle_notice_s=None,
    ).run_forever()


if __name__ == "__main__":
    main()
