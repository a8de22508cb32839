"""``kairos worker --pool NAME -- COMMAND...``: the tenant SDK's command worker as a CLI command.

Besides the rpc layer, the one place the server uses the tenant SDK (``kairos_sdk``): this worker
is a gRPC client like any tenant's and imports nothing of the executor tier.
"""

from __future__ import annotations

import logging
import sys

import click

from app.cli.pools import check_pool_name
from app.cli.runtime import fail


@click.command(context_settings={"ignore_unknown_options": True})
@click.option("--pool", required=True, help="Pool to serve (a tenant's own pool, or the shared pool of the key).")
@click.option("--concurrency", type=click.IntRange(1, 1000), default=4, show_default=True,
              help="Executions run at once.")
@click.option("--lease-seconds", type=click.FloatRange(1, 3600), default=30.0, show_default=True)
@click.option("--worker-id", default=None, help="Identity recorded with each attempt (default host:pid).")
@click.option("--report-ms", type=click.FloatRange(0, 1000), default=5.0, show_default=True,
              help="Finished outcomes are batched this long into one CompleteMany/FailMany call.")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def worker(pool: str, concurrency: int, lease_seconds: float, worker_id: str | None, report_ms: float,
           command: tuple[str, ...]) -> None:
    """Run COMMAND once per execution of POOL, with the payload as JSON on stdin.

    Exit 0 completes (stdout, as JSON when it parses, is the result); any other exit fails
    with the last lines of stderr as the error (65 is not retried). Reads KAIROS_GRPC_ADDR
    (default 127.0.0.1:50051) and KAIROS_API_KEY.
    """
    from app import observability
    from app.config import load_worker
    from kairos_sdk.command import command_handler
    from kairos_sdk.worker import Worker

    settings = load_worker()
    observability.setup_logging(settings.log_level, settings.log_format, "worker")
    if not settings.api_key:
        fail("set KAIROS_API_KEY (a tenant key, or a shared pool's worker key)")
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    w = Worker(check_pool_name(pool), command_handler(argv), addr=settings.grpc_addr, api_key=settings.api_key,
               concurrency=concurrency, lease_seconds=lease_seconds, worker_id=worker_id, report_s=report_ms / 1000)
    logging.getLogger("kairos.worker").info("worker starting", extra={
        "pool": pool, "addr": settings.grpc_addr, "command": argv})
    try:
        w.run_forever()
    except Exception as exc:  # grpc refusals (bad key, wrong pool) end the worker with a message
        import grpc

        if isinstance(exc, grpc.aio.AioRpcError):
            click.echo(f"error: {exc.code().name}: {exc.details()}", err=True)
            sys.exit(1)
        raise
