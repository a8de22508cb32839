"""``kairos pools ...``: shared worker pools, administered through ``app.executor.pools``."""

from __future__ import annotations

import json

import click

from app.cli.runtime import fail, run_command
from app.domain.jobs import POOL_NAME

POOL_NAME_HELP = "1-63 of A-Z a-z 0-9 . _ - starting with a letter or digit"


def check_pool_name(name: str) -> str:
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

    created = run_command(lambda db: service.create(db, check_pool_name(name), allow))
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
