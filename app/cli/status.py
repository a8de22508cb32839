"""``kairos status``: what GET /v1/status says, as rich tables or (``--json``) the body itself.

It talks to a running API (``--api-url`` / ``KAIROS_API_URL``, default http://127.0.0.1:8080) with
a tenant key (``KAIROS_API_KEY``: that tenant's figures) or the operator's admin token
(``--admin-token`` / ``KAIROS_ADMIN_TOKEN``: every tenant, or ``--tenant NAME``), over httpx and
nothing else of Kairos, so it runs anywhere the API is reachable. A problem response or bad input
exits 2 with one line on stderr; an API that cannot be reached exits 1.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any, NoReturn

import click
import httpx
from rich.console import Console
from rich.table import Table

DEFAULT_API_URL = "http://127.0.0.1:8080"
TIMEOUT_S = 10.0


def _fail(message: str, code: int) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    sys.exit(code)


def fetch_status(api_url: str, token: str, tenant: str | None) -> dict[str, Any]:
    """The body of GET /v1/status; exits 2 on a problem response, 1 when the API is unreachable."""
    url = api_url.rstrip("/") + "/v1/status"
    try:
        resp = httpx.get(
            url,
            params={"tenant": tenant} if tenant else None,
            timeout=TIMEOUT_S,
            headers={"Authorization": f"Bearer {token}", "Accept": "application/json"},
        )
    except httpx.InvalidURL as exc:
        _fail(f"--api-url: {exc}", 2)
    except httpx.TransportError as exc:
        _fail(f"cannot reach the Kairos API at {api_url}: {exc or type(exc).__name__}", 1)
    try:
        body = resp.json()
    except ValueError:
        body = None
    if resp.status_code != 200 or not isinstance(body, dict):
        if isinstance(body, dict) and "title" in body:
            detail = body.get("detail") or ""
            _fail(
                f"{resp.status_code} {body['title']}" + (f" {detail}" if detail and detail != body["title"] else ""), 2
            )
        _fail(f"{url} answered {resp.status_code} {resp.reason_phrase}", 2)
    return body


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) < 1000:
        return f"{value:.0f} ms"
    return f"{value / 1000:.2f} s"


def _when(value: str | None) -> str:
    return datetime.fromisoformat(value).strftime("%H:%M:%S") if value else "-"


def _pool(q: dict[str, Any]) -> str:
    return "http deliveries" if q["kind"] == "http" else q["pool"]  # shared pools read shared/NAME


def render(status: dict[str, Any], console: Console) -> None:
    scope = status["scope"]
    who = (
        f"tenant {scope['tenant']}"
        if scope["viewer"] == "tenant"
        else f"operator, tenant {scope['tenant']}"
        if scope["tenant"]
        else "operator, every tenant"
    )
    lag, shards, dead = status["startLag"], status["shards"], status["deadLetters"]
    summary = Table(title=f"Kairos status ({who})", show_header=False, title_justify="left", box=None, padding=(0, 2))
    summary.add_column(style="bold")
    summary.add_column()
    summary.add_row(
        f"start lag, last {lag['windowMinutes']} min",
        f"p50 {_ms(lag['p50Ms'])}   p99 {_ms(lag['p99Ms'])}   "
        f"({lag['started']} of {lag['occurrences']} occurrences started)",
    )
    if lag["oldestWaitingMs"] is not None:
        summary.add_row("oldest not started", _ms(lag["oldestWaitingMs"]))
    summary.add_row("shards owned", f"{shards['owned']} / {shards['total']} by {shards['schedulers']} scheduler(s)")
    summary.add_row("dead letters", f"{dead['count']}{'+' if dead['capped'] else ''}")
    console.print(summary)
    if shards["owners"] is not None:
        owners = Table(title="Schedulers", title_justify="left")
        owners.add_column("owner")
        owners.add_column("shards", justify="right")
        owners.add_column("lease until (UTC)", justify="right")
        for o in shards["owners"]:
            owners.add_row(o["owner"], str(o["shards"]), _when(o["leaseUntil"]))
        if not shards["owners"]:
            owners.add_row("[red]none live[/]", "0", "-")
        console.print(owners)
    queues = Table(title="Queues", title_justify="left")
    queues.add_column("pool")
    if scope["viewer"] == "admin":
        queues.add_column("tenant")
    for name in ("ready (due)", "ready later", "leased"):
        queues.add_column(name, justify="right")
    for q in status["queues"]:
        tenant_cell = [q["tenant"]] if scope["viewer"] == "admin" else []
        queues.add_row(_pool(q), *tenant_cell, str(q["readyDue"]), str(q["readyLater"]), str(q["leased"]))
    if not status["queues"]:
        queues.add_row("[dim]no ready or leased work[/]", *([""] if scope["viewer"] == "admin" else []), "", "", "")
    console.print(queues)


@click.command()
@click.option(
    "--api-url",
    envvar="KAIROS_API_URL",
    default=DEFAULT_API_URL,
    show_default=True,
    help="The Kairos API (env KAIROS_API_URL).",
)
@click.option(
    "--api-key",
    envvar="KAIROS_API_KEY",
    default="",
    show_default=False,
    help="A tenant's API key (env KAIROS_API_KEY): that tenant's figures.",
)
@click.option(
    "--admin-token",
    envvar="KAIROS_ADMIN_TOKEN",
    default="",
    show_default=False,
    help="The operator's admin token (env KAIROS_ADMIN_TOKEN): every tenant's figures.",
)
@click.option("--tenant", default=None, help="With the admin token: one tenant's figures.")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON body of GET /v1/status.")
def status(api_url: str, api_key: str, admin_token: str, tenant: str | None, as_json: bool) -> None:
    """Shards per scheduler, queue depths, start lag and dead letters, from a running API."""
    if not api_url.startswith(("http://", "https://")):
        _fail(f"--api-url must be an http:// or https:// URL, got {api_url!r}", 2)
    token = admin_token.strip() or api_key.strip()
    if not token:
        _fail("give a tenant key (KAIROS_API_KEY) or the admin token (--admin-token or KAIROS_ADMIN_TOKEN)", 2)
    if tenant is not None and not admin_token.strip():
        _fail("--tenant needs the admin token (--admin-token or KAIROS_ADMIN_TOKEN); a tenant key sees its own", 2)
    body = fetch_status(api_url, token, tenant)
    if as_json:
        click.echo(json.dumps(body, indent=2))
        return
    render(body, Console(highlight=False, soft_wrap=True))
