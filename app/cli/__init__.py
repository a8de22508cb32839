"""The `kairos` command line: every tier, the all-in-one `up`, and operator commands.

Bad input exits with code 2 and one line on stderr; other failures exit 1.

A command imports what it needs when it runs: the groups below are loaded by name (``LazyGroup``), so
``kairos jobs ls`` loads the REST client and not the database layer, the tiers or gRPC.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click


class LazyGroup(click.Group):
    """A group whose subcommands are imported only when one of them is asked for (by name, or for --help)."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})  # command name -> "module:attribute"

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module, _, attribute = self.lazy[cmd_name].partition(":")
            self.add_command(getattr(importlib.import_module(module), attribute), cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(
    cls=LazyGroup,
    lazy={
        "tenants": "app.cli.tenants:tenants",
        "pools": "app.cli.pools:pools",
        "worker": "app.cli.worker:worker",
        "jobs": "app.cli.jobs:jobs",
        "dead-letters": "app.cli.dead_letters:dead_letters",
        "drill": "app.cli.drill:drill",
        "crontab": "app.cli.crontab:crontab",
        "status": "app.cli.status:status",
        "history": "app.cli.history:history",
    },
)
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
    from app.config import load

    settings = load()
    if settings.api_workers > 1:
        observability.setup_logging(settings.log_level, settings.log_format, "api")
        sys.exit(run_workers(settings))
    run_service("api", settings, serve, loop_factory=uvloop.new_event_loop)


@main.command()
def scheduler() -> None:
    """Own shards, load due occurrences and dispatch them into executions."""
    from app.cli.runtime import run_service
    from app.config import load
    from app.scheduler.service import serve

    run_service("scheduler", load(), serve)


@main.command()
def executor() -> None:
    """Serve the gRPC worker protocol, run the HTTP-target pool and the lease reaper."""
    import uvloop

    from app.cli.runtime import run_service
    from app.config import load
    from app.executor.service import serve
    from app.rpc.server import GrpcTransport
    from app.rpc.servicer import ServicerConfig
    from app.store.payloads import PayloadStore

    # The composition root: the executor tier hosts the gRPC transport that sits above it. On uvloop: the
    # HTTP deliveries' sockets cost a tenth less of the executor's CPU than on asyncio's own loop
    # (docs/performance.md, "HTTP delivery").
    run_service(
        "executor",
        load(),
        lambda settings, db, stop: serve(
            settings,
            db,
            stop,
            GrpcTransport(
                settings.grpc_host,
                settings.grpc_port,
                ServicerConfig(
                    auth_failure_limit=settings.auth_failure_limit, auth_failure_window_s=settings.auth_failure_window_s
                ),
                supervisor_token=settings.supervisor_token,
                payloads=PayloadStore.from_settings(settings),
            ),
        ),
        loop_factory=uvloop.new_event_loop,
    )


@main.command()
@click.option("--demo", is_flag=True, help="Submit a demo job once everything is up.")
def up(demo: bool) -> None:
    """Run everything on one machine (embedded PostgreSQL unless KAIROS_DATABASE_URL is set)."""
    from app.cli.supervisor import run_all
    from app.config import load

    sys.exit(run_all(load(), demo=demo))


# -- database ------------------------------------------------------------------------------------------


@main.group(
    cls=LazyGroup,
    lazy={
        "reseal-secrets": "app.cli.signing_secrets:db_reseal_secrets",
        "new-secret-key": "app.cli.signing_secrets:db_new_secret_key",
        "rotate-oidc-key": "app.cli.oidc_keys:db_rotate_oidc_key",
        "oidc-keys": "app.cli.oidc_keys:db_oidc_keys",
    },
)
def db() -> None:
    """Database administration."""


@db.command("upgrade")
@click.option(
    "--cockroach-overlay",
    is_flag=True,
    help="Then apply the CockroachDB multi-region overlay (sql/cockroach/): regions, survival goal, "
    "table localities, due_index splits, history TTL (docs/cockroachdb.md). CockroachDB only.",
)
@click.option(
    "--primary-region",
    metavar="REGION",
    help="With --cockroach-overlay: the database's primary region (default KAIROS_PRIMARY_REGION).",
)
@click.option(
    "--secondary-region",
    metavar="REGION",
    help="With --cockroach-overlay: the region that takes the leaseholders when the primary is lost (the standby's).",
)
def db_upgrade(cockroach_overlay: bool, primary_region: str | None, secondary_region: str | None) -> None:
    """Apply pending migrations (idempotent; safe from several processes at once)."""
    from app.cli.oidc_keys import ensure_key
    from app.cli.runtime import database_url, run_command
    from app.cli.usage import fail
    from app.config import load
    from app.store import Database, migrate, overlay

    if not cockroach_overlay and (primary_region or secondary_region):
        fail("--primary-region and --secondary-region go with --cockroach-overlay")
    settings = load()

    async def work(_: Any) -> tuple[list[str], list[str]]:
        # DDL may legitimately run long: its own connections, without the statement timeout.
        d = Database.from_settings(settings, database_url(settings), name="db-upgrade", bounded=False)
        try:
            applied = await migrate.upgrade(d)
            await ensure_key(d)  # the identity tokens' first signing key, when the secret key is here
            if not cockroach_overlay:
                return applied, []
            return applied, await overlay.apply(
                d,
                primary_region=primary_region or settings.primary_region,
                secondary_region=secondary_region or None,
                retention_days=settings.retention_days,
            )
        finally:
            await d.close()

    applied, statements = run_command(work, upgrade=False)
    click.echo(f"applied {len(applied)} migration(s)" + (f": {', '.join(applied)}" if applied else ""))
    if cockroach_overlay:
        click.echo(f"applied the CockroachDB overlay ({len(statements)} statements)")


def run() -> None:
    """Console entry point: usage errors and bad KAIROS_* settings become one line and exit code 2."""
    try:
        code = main(standalone_mode=False)
    except click.UsageError as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(2)
    except click.Abort:
        sys.exit(130)
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        # app.config is loaded by the commands that read settings (not by the REST ones): only they raise this.
        config = sys.modules.get("app.config")
        if config is None or not isinstance(exc, config.InvalidSetting):
            raise
        click.echo(f"error: {exc.detail}", err=True)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)
