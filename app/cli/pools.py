"""Execution-tier commands: ``kairos pools ...`` and ``kairos worker --pool NAME -- COMMAND...``."""

from __future__ import annotations

import json
import logging
import sys

import click

from app.runtime import fail, run_command

POOL_NAME_HELP = "1-63 of A-Z a-z 0-9 . _ - starting with a letter or digit"


def _check_pool_name(name: str) -> str:
    from app.rpc.servicer import POOL_NAME

    if not POOL_NAME.match(name):
        fail(f"pool name must be {POOL_NAME_HELP}")
    return name


@click.group()
def pools() -> None:
    """Shared worker pools: served by a pool-scoped worker key, targeted by granted tenants."""


@pools.command("create")
@click.argument("name")
@click.option("--shared", is_flag=True, required=True,
              help="Create an operator-run shared pool (a tenant's own pools need no creation).")
@click.option("--allow", "allow", multiple=True, metavar="TENANT", help="Tenant allowed to target it (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pools_create(name: str, shared: bool, allow: tuple[str, ...], as_json: bool) -> None:
    """Create shared pool NAME and print its worker key (shown once; only its hash is stored)."""
    from app.executor import pools as service

    created = run_command(lambda db: service.create(db, _check_pool_name(name), allow))
    if as_json:
        click.echo(json.dumps({"pool": created.name, "workerKey": created.worker_key,
                               "tenants": list(created.tenants)}))
    else:
        click.echo(f"pool        {created.name} (shared)")
        click.echo(f"tenants     {', '.join(created.tenants) or '(none yet: kairos pools grant)'}")
        click.echo(f"worker key  {created.worker_key}")


@pools.command("grant")
@click.argument("name")
@click.argument("tenants", nargs=-1, required=True)
def pools_grant(name: str, tenants: tuple[str, ...]) -> None:
    """Let TENANTS target shared pool NAME."""
    from app.executor import pools as service

    run_command(lambda db: service.grant(db, name, tenants))
    click.echo(f"granted {', '.join(tenants)} on {name}")


@pools.command("issue-key")
@click.argument("name")
def pools_issue_key(name: str) -> None:
    """Issue another worker key for shared pool NAME."""
    from app.executor import pools as service

    click.echo(run_command(lambda db: service.issue_key(db, name)))


@pools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
def pools_list(as_json: bool) -> None:
    """Shared pools and the tenants granted each."""
    from app.executor import pools as service

    for p in run_command(service.list_all):
        if as_json:
            click.echo(json.dumps({"pool": p.name, "tenants": list(p.tenants),
                                   "createdAt": p.created_at.isoformat()}))
        else:
            click.echo(f"{p.name}\t{', '.join(p.tenants) or '-'}")


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
    import os

    from app import observability
    from kairos_sdk.command import command_handler
    from kairos_sdk.worker import Worker

    observability.setup_logging(os.environ.get("KAIROS_LOG_LEVEL", "INFO"),
                                os.environ.get("KAIROS_LOG_FORMAT", "json"), "worker")
    if not os.environ.get("KAIROS_API_KEY"):
        fail("set KAIROS_API_KEY (a tenant key, or a shared pool's worker key)")
    argv = list(command)
    if argv and argv[0] == "--":
        argv = argv[1:]
    w = Worker(_check_pool_name(pool), command_handler(argv), concurrency=concurrency,
               lease_seconds=lease_seconds, worker_id=worker_id, report_s=report_ms / 1000)
    logging.getLogger("kairos.worker").info("worker starting", extra={"pool": pool, "addr": os.environ.get(
        "KAIROS_GRPC_ADDR", "127.0.0.1:50051"), "command": argv})
    try:
        w.run_forever()
    except Exception as exc:  # grpc refusals (bad key, wrong pool) end the worker with a message
        import grpc

        if isinstance(exc, grpc.aio.AioRpcError):
            click.echo(f"error: {exc.code().name}: {exc.details()}", err=True)
            sys.exit(1)
        raise
