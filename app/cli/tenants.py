"""``kairos tenants ...``: tenants, their API keys, quotas and signing secrets, on the database directly
(operator commands: they need no running Kairos)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import click
from rich.console import Console

from app import errors
from app.cli.remote import ParamType, fields, table
from app.cli.runtime import run_command
from app.cli.signing_secrets import tenants_rotate_secret, tenants_show_secret
from app.cli.usage import fail
from app.store import Store
from app.store.tenants import UNCHANGED

T = TypeVar("T")
console = Console(stderr=False, highlight=False)
json_flag = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


@click.group()
def tenants() -> None:
    """Tenants, their API keys and quotas."""


def _tenant_json(t: Any) -> dict[str, Any]:
    return {
        "tenantId": str(t.tenant_id),
        "name": t.name,
        "weight": t.weight,
        "maxInflight": t.max_inflight,
        "maxDispatchPerSecond": t.max_dispatch_per_s,
        "maxActiveJobs": t.max_active_jobs,
        "maxSubmitPerSecond": t.max_submit_per_s,
        "maxManualRunsPerSecond": t.max_manual_per_s,
        "maxManualInFlight": t.max_manual_inflight,
        "createdAt": t.created_at.isoformat(),
    }


def _limit(value: int | None) -> str:
    return "none" if value is None else str(value)


QUOTA_COLUMNS = [
    "NAME",
    "ID",
    "WEIGHT",
    "MAX INFLIGHT",
    "MAX DISPATCH/S",
    "MAX ACTIVE JOBS",
    "MAX SUBMIT/S",
    "MAX MANUAL/S",
    "MAX MANUAL INFLIGHT",
    "CREATED",
]


def _quota_row(t: Any) -> tuple[Any, ...]:
    return (
        t.name,
        t.tenant_id,
        t.weight,
        t.max_inflight,
        t.max_dispatch_per_s,
        _limit(t.max_active_jobs),
        _limit(t.max_submit_per_s),
        _limit(t.max_manual_per_s),
        _limit(t.max_manual_inflight),
        t.created_at.strftime("%Y-%m-%d %H:%M:%SZ"),
    )


def _show(t: Any) -> None:
    fields([(column.lower(), value) for column, value in zip(QUOTA_COLUMNS, _quota_row(t), strict=True)])


class _QuotaOrNone(ParamType):
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
@json_flag
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
        click.echo(
            json.dumps(
                {"tenantId": str(tenant.tenant_id), "name": tenant.name, "apiKey": key, "signingSecret": signing}
            )
        )
    else:
        console.print(
            f"tenant     {tenant.name}\nid         {tenant.tenant_id}\napi key    {key}\n"
            f"signing    {signing}\n[dim]The key is stored only as a hash: keep it now.[/]"
        )


def _need_tenant(tenant_work: Callable[[Store, Any], Awaitable[T]], name: str) -> T:
    async def work(tx: Store) -> T:
        tenant = await tx.tenants.get_by_name(name)
        if tenant is None:
            raise errors.TenantNotFound(f"no tenant named {name!r}")
        return await tenant_work(tx, tenant)

    return run_command(lambda d: d.transaction(work))


@tenants.command("rotate-key")
@click.argument("name")
@json_flag
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
@click.option(
    "--max-active-jobs",
    type=_QuotaOrNone(100_000_000),
    default=UNCHANGED,
    help="Active or paused jobs the tenant may hold; none: no limit (docs/quotas.md).",
)
@click.option(
    "--max-submit-per-s",
    type=_QuotaOrNone(1_000_000),
    default=UNCHANGED,
    help="Jobs the tenant may submit per second, per API process; none: no limit.",
)
@click.option(
    "--max-manual-per-s",
    type=_QuotaOrNone(1_000_000),
    default=UNCHANGED,
    help="Executions :run and :backfill may make per second, per API process; none: no limit.",
)
@click.option(
    "--max-manual-inflight",
    type=_QuotaOrNone(100_000_000),
    default=UNCHANGED,
    help="Unfinished executions made by :run and :backfill the tenant may hold; none: no limit.",
)
@json_flag
def tenants_set_quota(
    name: str,
    weight: int | None,
    max_inflight: int | None,
    max_dispatch_per_s: int | None,
    max_active_jobs: int | None,
    max_submit_per_s: int | None,
    max_manual_per_s: int | None,
    max_manual_inflight: int | None,
    as_json: bool,
) -> None:
    """Change a tenant's quotas (the ones not given stay as they are); prints them all."""
    if (
        weight is None
        and max_inflight is None
        and max_dispatch_per_s is None
        and max_active_jobs is UNCHANGED
        and max_submit_per_s is UNCHANGED
        and max_manual_per_s is UNCHANGED
        and max_manual_inflight is UNCHANGED
    ):
        fail(
            "give at least one of --weight, --max-inflight, --max-dispatch-per-s, --max-active-jobs, "
            "--max-submit-per-s, --max-manual-per-s, --max-manual-inflight"
        )
    tenant = _need_tenant(
        lambda tx, t: tx.tenants.set_quota(
            t.tenant_id,
            weight=weight,
            max_inflight=max_inflight,
            max_dispatch_per_s=max_dispatch_per_s,
            max_active_jobs=max_active_jobs,
            max_submit_per_s=max_submit_per_s,
            max_manual_per_s=max_manual_per_s,
            max_manual_inflight=max_manual_inflight,
        ),
        name,
    )
    if as_json:
        click.echo(json.dumps(_tenant_json(tenant)))
    else:
        _show(tenant)


@tenants.command("show")
@click.argument("name")
@json_flag
def tenants_show(name: str, as_json: bool) -> None:
    """A tenant's id and quotas."""

    async def same(_conn: Any, t: Any) -> Any:
        return t

    tenant = _need_tenant(same, name)
    if as_json:
        click.echo(json.dumps(_tenant_json(tenant), indent=2))
    else:
        _show(tenant)


@tenants.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON lines.")
def tenants_list(as_json: bool) -> None:
    """All tenants with their quotas."""
    found = run_command(lambda d: d.transaction(lambda tx: tx.tenants.list_all()))
    if as_json:
        for t in found:
            click.echo(json.dumps(_tenant_json(t)))
    elif not found:
        click.echo("no tenants (kairos tenants create NAME makes one)")
    else:
        table(QUOTA_COLUMNS, [_quota_row(t) for t in found])


@tenants.command("set-critical")
@click.argument("name")
@click.argument("state", metavar="on|off")
def tenants_set_critical(name: str, state: str) -> None:
    """Commit the tenant's submits synchronously to the standby (on) or locally (off); docs/durability.md.

    Every API process picks the change up within a few seconds (app.api.jobs._quotas.CRITICAL_REFRESH_S)."""
    if state not in ("on", "off"):
        fail(f"the state is on or off, not {state!r}")
    critical = _need_tenant(lambda tx, t: tx.durability.set_critical(t.tenant_id, state == "on"), name)
    click.echo(json.dumps({"name": name, "critical": critical}))


tenants.add_command(tenants_rotate_secret)
tenants.add_command(tenants_show_secret)
