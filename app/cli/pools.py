"""``kairos pools ...``: shared worker pools, administered through ``app.executor.pools``."""

from __future__ import annotations

import json

import click

from app.cli.usage import fail
from app.domain import queues


def check_pool_ref(ref: str) -> str:
    """A pool as ``kairos worker --pool`` takes it: NAME (the key's tenant's own) or shared/NAME."""
    if queues.parse_pool_ref(ref) is None:
        fail(f"--pool: {queues.POOL_REF_HELP}")
    return ref


def shared_pool_name(ref: str) -> str:
    """The shared pool ``kairos pools`` commands name: NAME, or shared/NAME as jobs target it."""
    parsed = queues.parse_pool_ref(ref)
    if parsed is None:
        fail(f"a shared pool is NAME or {queues.SHARED_PREFIX}NAME, NAME being {queues.POOL_NAME_HELP}")
    return parsed.name


@click.group()
def pools() -> None:
    """Shared worker pools: served by a pool-scoped worker key, targeted by granted tenants as shared/NAME.

    A shared pool never captures a tenant's own pool of the same name: jobs and workers name the
    shared one shared/NAME, and a bare NAME is always the tenant's own.
    """


@pools.command("create")
@click.argument("name")
@click.option(
    "--shared",
    is_flag=True,
    required=True,
    help="Create an operator-run shared pool (a tenant's own pools need no creation).",
)
@click.option("--allow", "allow", multiple=True, metavar="TENANT", help="Tenant allowed to target it (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def pools_create(name: str, shared: bool, allow: tuple[str, ...], as_json: bool) -> None:
    """Create shared pool NAME (given as NAME or shared/NAME) and print its worker key (shown once; only its
    hash is stored). Granted tenants target it as shared/NAME."""
    from app.cli.runtime import run_command
    from app.executor import pools as executor_pools

    pool = shared_pool_name(name)
    created = run_command(lambda db: executor_pools.create(db, pool, allow))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "pool": queues.shared_ref(created.name),
                    "name": created.name,
                    "workerKey": created.worker_key,
                    "tenants": list(created.tenants),
                }
            )
        )
    else:
        click.echo(
            f"pool        {queues.shared_ref(created.name)} (target it as such; workers lease it by "
            "that name with the key below)"
        )
        click.echo(f"tenants     {', '.join(created.tenants) or '(none yet: kairos pools grant)'}")
        click.echo(f"worker key  {created.worker_key}")


@pools.command("grant")
@click.argument("name")
@click.argument("tenants", nargs=-1, required=True)
def pools_grant(name: str, tenants: tuple[str, ...]) -> None:
    """Let TENANTS target shared pool NAME (as shared/NAME)."""
    from app.cli.runtime import run_command
    from app.executor import pools as executor_pools

    pool = shared_pool_name(name)
    run_command(lambda db: executor_pools.grant(db, pool, tenants))
    click.echo(f"granted {', '.join(tenants)} on {queues.shared_ref(pool)}")


@pools.command("issue-key")
@click.argument("name")
def pools_issue_key(name: str) -> None:
    """Issue another worker key for shared pool NAME (NAME or shared/NAME)."""
    from app.cli.runtime import run_command
    from app.executor import pools as executor_pools

    pool = shared_pool_name(name)
    click.echo(run_command(lambda db: executor_pools.issue_key(db, pool)))


@pools.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
def pools_list(as_json: bool) -> None:
    """Shared pools (as jobs target them: shared/NAME) and the tenants granted each."""
    from app.cli.runtime import run_command
    from app.executor import pools as executor_pools

    found = run_command(executor_pools.list_all)
    if not found and not as_json:
        click.echo("no shared pools (kairos pools create NAME --shared makes one)")
    for p in found:
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "pool": queues.shared_ref(p.name),
                        "name": p.name,
                        "tenants": list(p.tenants),
                        "createdAt": p.created_at.isoformat(),
                    }
                )
            )
        else:
            click.echo(f"{queues.shared_ref(p.name)}\t{', '.join(p.tenants) or '-'}")
