"""``kairos tenants rotate-secret|show-secret`` and ``kairos db reseal-secrets|new-secret-key``.

Tenants' HTTP signing secrets are sealed at rest under KAIROS_SECRET_KEY (``app.store.sealing``);
these commands open, rotate and re-seal them. ``app.cli`` attaches them to its ``tenants`` and
``db`` groups.
"""

from __future__ import annotations

import json
from typing import Any

import click

from app import errors
from app.cli.remote import DURATION
from app.cli.runtime import run_command
from app.cli.usage import fail
from app.store import Database, Store
from app.store.tenants import StoredSigningSecrets

# A longer overlap keeps a leaked secret valid for longer; a receiver needs hours, not months.
MAX_OVERLAP_S = 30 * 86400


def _secrets_json(name: str, stored: StoredSigningSecrets) -> dict[str, Any]:
    s = stored.secrets
    return {
        "name": name,
        "signingSecret": s.current,
        "previousValidUntil": s.previous_until.isoformat() if s.previous is not None and s.previous_until else None,
        "rotatedAt": stored.rotated_at.isoformat() if stored.rotated_at else None,
    }


def _for_tenant(name: str, work: Any) -> Any:
    async def run(db: Database) -> Any:
        async def tx_work(tx: Store) -> Any:
            tenant = await tx.tenants.get_by_name(name)
            if tenant is None:
                raise errors.TenantNotFound(f"no tenant named {name!r}")
            return await work(tx, tenant.tenant_id)

        return await db.transaction(tx_work)

    return run_command(run)


@click.command("rotate-secret")
@click.argument("name")
@click.option(
    "--overlap",
    type=DURATION,
    default=None,
    metavar="DURATION",
    help="How long deliveries are signed with the previous secret as well (90m, 24h, 2d; 0: not at "
    "all)  [default: KAIROS_SIGNING_SECRET_OVERLAP_S, 24h]",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def tenants_rotate_secret(name: str, overlap: float | None, as_json: bool) -> None:
    """Give tenant NAME a new HTTP signing secret and print it.

    Until the overlap ends every delivery carries two signatures (two v1= in Kairos-Signature):
    one with the new secret, one with the previous; the tenant's receivers switch to the new
    secret meanwhile. A secret still in an earlier rotation's overlap stops at once.
    """
    from app.config import load

    overlap_s = load().signing_secret_overlap_s if overlap is None else overlap
    if not 0 <= overlap_s <= MAX_OVERLAP_S:
        fail(f"--overlap must be between 0 and {MAX_OVERLAP_S // 86400} days")
    stored = _for_tenant(name, lambda tx, tenant_id: tx.tenants.rotate_signing_secret(tenant_id, overlap_s))
    if as_json:
        click.echo(json.dumps(_secrets_json(name, stored)))
        return
    click.echo(f"signing    {stored.secrets.current}")
    until = stored.secrets.previous_until
    click.echo(f"previous   signs too until {until.isoformat()}" if until else "previous   no longer signs")


@click.command("show-secret")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON (with the end of a rotation's overlap).")
def tenants_show_secret(name: str, as_json: bool) -> None:
    """Print tenant NAME's current HTTP signing secret."""
    stored = _for_tenant(name, lambda tx, tenant_id: tx.tenants.signing_secrets(tenant_id))
    click.echo(json.dumps(_secrets_json(name, stored)) if as_json else stored.secrets.current)


@click.command("reseal-secrets")
def db_reseal_secrets() -> None:
    """Seal every signing secret and identity-token key under the first key of KAIROS_SECRET_KEY (plaintext
    secrets from before migration 0011 included). Run it after putting a new key first; then the old key may go."""
    from app.cli.oidc_keys import reseal_keys
    from app.executor import signing

    result = run_command(signing.reseal_all)
    click.echo(f"sealed {result.sealed} plaintext secret(s), re-sealed {result.resealed} under the first key")
    keys = run_command(reseal_keys)
    click.echo(f"re-sealed {keys} identity-token key(s) under the first key")


@click.command("new-secret-key")
def db_new_secret_key() -> None:
    """Print a new key for KAIROS_SECRET_KEY (a Fernet key); nothing is stored."""
    from app.store import sealing

    click.echo(sealing.new_key())
