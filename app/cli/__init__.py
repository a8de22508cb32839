"""The `kairos` command line: every tier, the all-in-one `up`, and operator commands.

Bad input exits with code 2 and one line on stderr; other failures exit 1.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from app import errors
from app.cli.crontab import crontab
from app.cli.dead_letters import dead_letters
from app.cli.drill import drill
from app.cli.history import history
from app.cli.jobs import jobs
from app.cli.pools import pools
from app.cli.runtime import fail, run_command
from app.cli.signing_secrets import db_new_secret_key, db_reseal_secrets, tenants_rotate_secret, tenants_show_secret
from app.cli.status import status
from app.cli.worker import worker
from app.config import InvalidSetting, load
from app.store import Store
from app.store.tenants import UNCHANGED

T = TypeVar("T")
console = Console(stderr=False, highlight=False)


@click.group()
@click.version_option(package_name="kairos")
def main() -> None:
    """Kairos: a distributed job scheduler."""


# -- tiers ---------------------------------------------------------------------------------------------

@main.command()
def api() -> None:
    """Serve the REST API (Litestar on uvicorn; KAIROS_API_WORKERS processes, one per CPU by default)."""
    import uvloop

    from app import observability
    from app.api.server import run_workers, serve
    from app.cli.runtime import run_service

    settings = load()
    if settings.api_workers > 1:
        observability.setup_logging(settings.log_level, settings.log_format, "api")
        sys.exit(run_workers(settings))
    run_service("api", settings, serve, loop_factory=uvloop.new_event_loop)


@main.command()
def scheduler() -> None:
    """Own shards, load due occurrences and dispatch them into executions."""
    from app.cli.runtime import run_service
    from app.scheduler.service import serve

    run_service("scheduler", load(), serve)


@main.command()
def executor() -> None:
    """Serve the gRPC worker protocol, run the HTTP-target pool and the lease reaper."""
    import uvloop

    from app.cli.runtime import run_service
    from app.executor.service import serve
    from app.rpc.server import GrpcTransport
    from app.rpc.servicer import ServicerConfig
    from app.store.payloads import PayloadStore

    # The composition root: the executor tier hosts the gRPC transport that sits above it. On uvloop: the
    # HTTP deliveries' sockets cost a tenth less of the executor's CPU than on asyncio's own loop
    # (docs/performance.md, "HTTP delivery").
    run_service("executor", load(), lambda settings, db, stop: serve(
        settings, db, stop, GrpcTransport(settings.grpc_host, settings.grpc_port,
                                          ServicerConfig(auth_failure_limit=settings.auth_failure_limit,
                                                         auth_failure_window_s=settings.auth_failure_window_s),
                                          supervisor_token=settings.supervisor_token,
                                          payloads=PayloadStore.from_settings(settings))),
                loop_factory=uvloop.new_event_loop)


@main.command()
@click.option("--demo", is_flag=True, help="Submit a demo job once everything is up.")
def up(demo: bool) -> None:
    """Run everything on one machine (embedded PostgreSQL unless KAIROS_DATABASE_URL is set)."""
    from app.cli.supervisor import run_all

    sys.exit(run_all(load(), demo=demo))


# -- database ------------------------------------------------------------------------------------------

@main.group()
def db() -> None:
    """Database administration."""


@db.command("upgrade")
@click.option("--cockroach-overlay", is_flag=True,
              help="Then apply the CockroachDB multi-region overlay (sql/cockroach/): regions, survival goal, "
                   "table localities, due_index splits, history TTL (docs/cockroachdb.md). CockroachDB only.")
@click.option("--primary-region", metavar="REGION", help="With --cockroach-overlay: the database's primary "
                                                         "region (default KAIROS_PRIMARY_REGION).")
@click.option("--secondary-region", metavar="REGION", help="With --cockroach-overlay: the region that takes the "
                                                           "leaseholders when the primary is lost (the standby's).")
def db_upgrade(cockroach_overlay: bool, primary_region: str | None, secondary_region: str | None) -> None:
    """Apply pending migrations (idempotent; safe from several processes at once)."""
    from app.cli.runtime import database_url
    from app.store import Database, migrate, overlay

    if not cockroach_overlay and (primary_region or secondary_region):
        fail("--primary-region and --secondary-region go with --cockroach-overlay")
    settings = load()

    async def work(_: Any) -> tuple[list[str], list[str]]:
        # DDL may legitimately run long: its own connections, without the statement timeout.
        d = Database.from_settings(settings, database_url(settings), name="db-upgrade", bounded=False)
        try:
            applied = await migrate.upgrade(d)
            if not cockroach_overlay:
                return applied, []
            return applied, await overlay.apply(d, primary_region=primary_region or settings.primary_region,
                                                secondary_region=secondary_region or None,
                                                retention_days=settings.retention_days)
        finally:
            await d.close()

    applied, statements = run_command(work, upgrade=False)
    click.echo(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else ""))
    if cockroach_overlay:
        click.echo(f"applied the CockroachDB overlay ({len(statements)} statements)")


# -- tenants -------------------------------------------------------------------------------------------

@main.group()
def tenants() -> None:
    """Tenants, their API keys and quotas."""


def _tenant_json(t: Any) -> dict[str, Any]:
    return {"tenantId": str(t.tenant_id), "name": t.name, "weight": t.weight, "maxInflight": t.max_inflight,
            "maxDispatchPerSecond": t.max_dispatch_per_s, "maxActiveJobs": t.max_active_jobs,
            "maxSubmitPerSecond": t.max_submit_per_s, "maxManualRunsPerSecond": t.max_manual_per_s,
            "maxManualInFlight": t.max_manual_inflight, "createdAt": t.created_at.isoformat()}


class _QuotaOrNone(click.ParamType):
    """A submit quota: an integer in [1, high], or ``none`` to clear it (no limit)."""

    name = "N|none"

    def __init__(self, high: int) -> None:
        self.high = high

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | None:
        if value is UNCHANGED:
            return value  # type: ignore[no-any-return]
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            return None
        try:
            number = int(str(value).strip())
        except ValueError:
            number = 0
        if not 1 <= number <= self.high:
            self.fail(f"{value!r} is not an integer 1-{self.high} or none", param, ctx)
        return number


@tenants.command("create")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tenants_create(name: str, as_json: bool) -> None:
    """Create a tenant; prints its id, API key (shown once) and HTTP signing secret (kairos tenants show-secret)."""
    if not name.strip() or len(name) > 100:
        fail("a tenant name is 1-100 characters")
    created = run_command(lambda d: d.transaction(lambda tx: tx.tenants.create(name)))
    if created is None:
        fail(f"tenant {name!r} already exists")
    from app.store.tenants import signing_secrets_of

    tenant, key = created
    signing = signing_secrets_of(tenant).current  # stored sealed (app.store.sealing)
    if as_json:
        click.echo(json.dumps({"tenantId": str(tenant.tenant_id), "name": tenant.name, "apiKey": key,
                               "signingSecret": signing}))
    else:
        console.print(f"tenant     {tenant.name}\nid         {tenant.tenant_id}\napi key    {key}\n"
                      f"signing    {signing}\n[dim]The key is stored only as a hash: keep it now.[/]")


def _need_tenant(tenant_work: Callable[[Store, Any], Awaitable[T]], name: str) -> T:
    async def work(tx: Store) -> T:
        tenant = await tx.tenants.get_by_name(name)
        if tenant is None:
            raise errors.TenantNotFound(f"no tenant named {name!r}")
        return await tenant_work(tx, tenant)

    return run_command(lambda d: d.transaction(work))


@tenants.command("rotate-key")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tenants_rotate_key(name: str, as_json: bool) -> None:
    """Issue a new API key and revoke the old ones at once."""
    key, revoked = _need_tenant(lambda tx, t: tx.tenants.rotate_key(t.tenant_id), name)
    if as_json:
        click.echo(json.dumps({"name": name, "apiKey": key, "revoked": revoked}))
    else:
        console.print(f"api key    {key}\nrevoked    {revoked} earlier key(s)")


@tenants.command("set-quota")
@click.argument("name")
@click.option("--weight", type=click.IntRange(1, 1000), help="Fairness weight in shared pools.")
@click.option("--max-inflight", type=click.IntRange(1, 1_000_000), help="Leased executions per pool at once.")
@click.option("--max-dispatch-per-s", type=click.IntRange(1, 1_000_000), help="Occurrences dispatched per second.")
@click.option("--max-active-jobs", type=_QuotaOrNone(100_000_000), default=UNCHANGED,
              help="Active or paused jobs the tenant may hold; none: no limit (docs/quotas.md).")
@click.option("--max-submit-per-s", type=_QuotaOrNone(1_000_000), default=UNCHANGED,
              help="Jobs the tenant may submit per second, per API process; none: no limit.")
@click.option("--max-manual-per-s", type=_QuotaOrNone(1_000_000), default=UNCHANGED,
              help="Executions :run and :backfill may make per second, per API process; none: no limit.")
@click.option("--max-manual-inflight", type=_QuotaOrNone(100_000_000), default=UNCHANGED,
              help="Unfinished executions made by :run and :backfill the tenant may hold; none: no limit.")
def tenants_set_quota(name: str, weight: int | None, max_inflight: int | None, max_dispatch_per_s: int | None,
                      max_active_jobs: int | None, max_submit_per_s: int | None, max_manual_per_s: int | None,
                      max_manual_inflight: int | None) -> None:
    """Change a tenant's quotas (the ones not given stay as they are)."""
    if (weight is None and max_inflight is None and max_dispatch_per_s is None
            and max_active_jobs is UNCHANGED and max_submit_per_s is UNCHANGED
            and max_manual_per_s is UNCHANGED and max_manual_inflight is UNCHANGED):
        fail("give at least one of --weight, --max-inflight, --max-dispatch-per-s, --max-active-jobs, "
             "--max-submit-per-s, --max-manual-per-s, --max-manual-inflight")
    tenant = _need_tenant(lambda tx, t: tx.tenants.set_quota(
        t.tenant_id, weight=weight, max_inflight=max_inflight, max_dispatch_per_s=max_dispatch_per_s,
        max_active_jobs=max_active_jobs, max_submit_per_s=max_submit_per_s, max_manual_per_s=max_manual_per_s,
        max_manual_inflight=max_manual_inflight), name)
    click.echo(json.dumps(_tenant_json(tenant)))


@tenants.command("show")
@click.argument("name")
def tenants_show(name: str) -> None:
    """A tenant's id and quotas."""

    async def same(_conn: Any, t: Any) -> Any:
        return t

    click.echo(json.dumps(_tenant_json(_need_tenant(same, name)), indent=2))


@tenants.command("list")
def tenants_list() -> None:
    """All tenants."""
    for t in run_command(lambda d: d.transaction(lambda tx: tx.tenants.list_all())):
        click.echo(json.dumps(_tenant_json(t)))


@tenants.command("set-critical")
@click.argument("name")
@click.argument("state", metavar="on|off")
def tenants_set_critical(name: str, state: str) -> None:
    """Commit the tenant's submits synchronously to the standby (on) or locally (off); docs/durability.md.

    Every API process picks the change up within a few seconds (app.api.submit.CRITICAL_REFRESH_S)."""
    if state not in ("on", "off"):
        fail(f"the state is on or off, not {state!r}")
    critical = _need_tenant(lambda tx, t: tx.durability.set_critical(t.tenant_id, state == "on"), name)
    click.echo(json.dumps({"name": name, "critical": critical}))


tenants.add_command(tenants_rotate_secret)
tenants.add_command(tenants_show_secret)
db.add_command(db_reseal_secrets)
db.add_command(db_new_secret_key)
main.add_command(pools)
main.add_command(worker)
main.add_command(jobs)
main.add_command(dead_letters)
main.add_command(drill)
main.add_command(crontab)
main.add_command(status)
main.add_command(history)


def run() -> None:
    """Console entry point: usage errors and bad KAIROS_* settings become one line and exit code 2."""
    try:
        code = main(standalone_mode=False)
    except InvalidSetting as exc:
        click.echo(f"error: {exc.detail}", err=True)
        sys.exit(2)
    except click.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)

