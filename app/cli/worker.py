"""``kairos worker --pool NAME|shared/NAME -- COMMAND...``: the tenant SDK's command worker as a CLI command.

Besides the rpc layer, the one place the server uses the tenant SDK (``kairos_sdk``): this worker
is a gRPC client like any tenant's and imports nothing of the executor tier.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from pathlib import Path

import click

from app.cli.pools import check_pool_ref
from app.cli.usage import fail

# The command's contract, printed under `kairos worker --help` (\b keeps click from re-wrapping a paragraph);
# docs/worker-protocol.md ("The command worker") says the same at more length.
EPILOG = """\b
Per execution COMMAND runs once, in its own process group:
  stdin        the payload as JSON (null when there is none), then end of file
  environment  the worker's own, without KAIROS_API_KEY, plus
    KAIROS_EXECUTION_ID     the execution's id
    KAIROS_JOB_ID           the job's id
    KAIROS_ATTEMPT          the attempt number, 1 on the first run
    KAIROS_SCHEDULED_FOR    the occurrence's nominal time, ISO 8601 UTC with Z
    KAIROS_IDEMPOTENCY_KEY  <jobId>:<scheduledFor>, the same for every attempt

\b
Exit status:
  0    completed; stdout (its last 16 KiB) is the result: JSON when it parses,
       else {"stdout": "..."}, nothing: null
  65   failed, not retryable (EX_DATAERR): a dead letter at once
  75   failed, retryable (EX_TEMPFAIL): retried with backoff while attempts remain
  any other exit, or death by a signal: failed, retryable, as 75
The error recorded is "exit status N" and the last 20 lines of stderr. A lost
lease, the job's timeoutSeconds or a shutdown past its grace kills the process
group (SIGKILL).

\b
Address: --addr, else KAIROS_GRPC_ADDR, else KAIROS_GRPC_HOST:KAIROS_GRPC_PORT
(default 127.0.0.1:50051). Key: KAIROS_API_KEY, a tenant key or a shared pool's
worker key. More: docs/worker-protocol.md, "The command worker".
"""


def command_problem(program: str) -> str | None:
    """Why ``program`` (COMMAND's first word) cannot be run per execution, or None: checked once at start, so a
    typo ends the worker with one line instead of spending every execution's attempts on it."""
    if os.sep not in program:  # looked up on PATH, as each execution will
        return None if shutil.which(program) else f"command {program!r} not found on PATH"
    if not Path(program).exists():
        return f"command {program!r} not found"
    if not Path(program).is_file():
        return f"command {program!r} is not a file"
    if not os.access(program, os.X_OK):
        return f"command {program!r} is not executable (chmod +x {program})"
    return None


@click.command(context_settings={"ignore_unknown_options": True}, epilog=EPILOG)
@click.option(
    "--pool",
    required=True,
    help="Pool to serve: NAME, a pool of the key's tenant, or shared/NAME, the shared pool of a pool key.",
)
@click.option(
    "--addr",
    default=None,
    metavar="HOST:PORT",
    help="Executor address [default: KAIROS_GRPC_ADDR, else KAIROS_GRPC_HOST:KAIROS_GRPC_PORT].",
)
@click.option(
    "--concurrency", type=click.IntRange(1, 1000), default=4, show_default=True, help="Executions run at once."
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(1, 3600),
    default=30.0,
    show_default=True,
    help="Lease length asked for each execution: heartbeats renew it every third of this, and the "
    "executions of a worker that died are leased again once it runs out.",
)
@click.option("--worker-id", default=None, help="Identity recorded with each attempt (default host:pid).")
@click.option(
    "--report-ms",
    type=click.FloatRange(0, 1000),
    default=5.0,
    show_default=True,
    help="Finished outcomes are batched this long into one CompleteMany/FailMany call.",
)
# 60: kairos_sdk.worker.IDLE_NOTICE_S_DEFAULT, not imported here so that every other command starts without grpc.
@click.option(
    "--idle-notice-s",
    type=click.FloatRange(0, 86400),
    default=60.0,
    show_default=True,
    help="After this long with nothing leased, log that no work came from the pool (again every "
    "such stretch; 0: never).",
)
@click.option(
    "--prefetch",
    type=click.IntRange(0, 1000),
    default=None,
    help="Executions leased ahead of free slots, waiting in the worker (heartbeaten) for one "
    "[default: sized from the measured Lease round trip against the commands' run time, "
    "about 0 for commands that run for seconds; 0: never].",
)
@click.option(
    "--lease-calls",
    type=click.IntRange(1, 8),
    default=1,
    show_default=True,
    help="Lease calls in flight at once under load: more fill slots that free during a round trip "
    "sooner, which pays with an executor far away.",
)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def worker(
    pool: str,
    addr: str | None,
    concurrency: int,
    lease_seconds: float,
    worker_id: str | None,
    report_ms: float,
    idle_notice_s: float,
    prefetch: int | None,
    lease_calls: int,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND once per execution of POOL, with the payload as JSON on stdin.

    Exit 0 completes the execution, 65 dead-letters it, any other exit (75 by convention)
    fails it for a retry with backoff; the details are below.
    """
    from app import observability
    from app.config import load_worker
    from kairos_sdk.command import command_handler
    from kairos_sdk.worker import Worker

    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        fail("give the command to run after --, e.g. kairos worker --pool emails -- ./examples/send-email.sh")
    if problem := command_problem(argv[0]):
        fail(problem)
    settings = load_worker()
    observability.setup_logging(settings.log_level, settings.log_format, "worker")
    if not settings.api_key:
        fail("set KAIROS_API_KEY (a tenant key, or a shared pool's worker key)")
    executor = addr or settings.executor_addr
    w = Worker(
        check_pool_ref(pool),
        command_handler(argv),
        addr=executor,
        api_key=settings.api_key,
        concurrency=concurrency,
        lease_seconds=lease_seconds,
        worker_id=worker_id,
        report_s=report_ms / 1000,
        idle_notice_s=idle_notice_s,
        prefetch=prefetch,
        lease_calls=lease_calls,
    )
    logging.getLogger("kairos.worker").info("worker starting", extra={"pool": pool, "addr": executor, "command": argv})
    try:
        w.run_forever()
    except Exception as exc:  # grpc refusals (bad key, wrong pool) end the worker with a message
        import grpc

        if isinstance(exc, grpc.aio.AioRpcError):
            click.echo(f"error: {exc.code().name}: {exc.details()}", err=True)
            sys.exit(1)
        raise
