"""``kairos db rotate-oidc-key|oidc-keys``: the keys that sign HTTP targets' identity tokens.

The keys live in the database, their private halves sealed under KAIROS_SECRET_KEY
(``app.store.oidc_keys``); ``app.cli`` attaches these commands to its ``db`` group.
"""

from __future__ import annotations

import json
from typing import Any

import click

from app.cli.remote import DURATION
from app.cli.runtime import run_command
from app.cli.usage import fail
from app.store import Database, Store

# A longer overlap keeps a retired key trusted for longer; receivers refetch the key set within minutes.
MAX_OVERLAP_S = 30 * 86400


async def ensure_key(db: Database) -> str | None:
    """Make the first signing key when there is none and the secret key is configured; its id (None: the
    secret key is not configured here, so the key is left to a process that has it)."""
    from app.config import InvalidSetting, load
    from app.store import oidc_keys, sealing

    settings = load()
    try:
        keyring = sealing.keyring_for(settings)
    except InvalidSetting:
        return None

    async def work(tx: Store) -> str:
        return (await tx.oidc_keys.ensure(oidc_keys.algorithm_of(settings.oidc_key_algorithm), keyring)).key_id

    return await db.transaction(work)


async def reseal_keys(db: Database) -> int:
    """Re-seal every identity-token key not sealed under the first key of KAIROS_SECRET_KEY; how many were."""
    from app.store import sealing

    keyring = sealing.current()

    async def work(tx: Store) -> int:
        moved = 0
        for key_id, stored in await tx.oidc_keys.sealed_list():
            if not keyring.sealed_by_primary(stored):
                moved += await tx.oidc_keys.reseal(key_id, stored, keyring.seal_bytes(keyring.open_bytes(stored)))
        return moved

    return await db.transaction(work)


def _key_json(key: Any) -> dict[str, Any]:
    return {
        "keyId": key.key_id,
        "algorithm": key.algorithm,
        "createdAt": key.created_at.isoformat(),
        "signsFrom": key.signs_from.isoformat(),
        "retireAt": key.retire_at.isoformat() if key.retire_at else None,
    }


@click.command("rotate-oidc-key")
@click.option(
    "--overlap",
    type=DURATION,
    default=None,
    metavar="DURATION",
    help="How long the replaced key stays published, so tokens it signed still verify (at least "
    "KAIROS_OIDC_TOKEN_TTL_S)  [default: KAIROS_OIDC_KEY_OVERLAP_S, 24h]",
)
@click.option(
    "--publish-ahead",
    "ahead",
    type=DURATION,
    default=None,
    metavar="DURATION",
    help="How long the new key is published before it signs, so receivers caching the key set have it "
    "(0: signs at once)  [default: KAIROS_OIDC_KEY_PUBLISH_AHEAD_S, 15m]",
)
@click.option(
    "--algorithm",
    type=click.Choice(["ES256", "RS256"], case_sensitive=False),
    default=None,
    help="The new key's algorithm  [default: KAIROS_OIDC_KEY_ALGORITHM, ES256]",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def db_rotate_oidc_key(overlap: float | None, ahead: float | None, algorithm: str | None, as_json: bool) -> None:
    """Make a new key to sign HTTP targets' identity tokens.

    The new key is in /.well-known/jwks.json at once and signs once the publish-ahead time has passed; the
    key it replaces signs until then and stays published for the overlap after it. Keys whose overlap
    has ended are deleted.
    """
    from app.config import load
    from app.store import oidc_keys, sealing

    settings = load()
    overlap_s = settings.oidc_key_overlap_s if overlap is None else overlap
    if not settings.oidc_token_ttl_s <= overlap_s <= MAX_OVERLAP_S:
        fail(
            f"--overlap must be between KAIROS_OIDC_TOKEN_TTL_S ({settings.oidc_token_ttl_s}s) and "
            f"{MAX_OVERLAP_S // 86400} days"
        )
    ahead_s = settings.oidc_key_publish_ahead_s if ahead is None else ahead
    if not 0 <= ahead_s <= MAX_OVERLAP_S:
        fail(f"--publish-ahead must be between 0 and {MAX_OVERLAP_S // 86400} days")
    chosen = oidc_keys.algorithm_of(algorithm or settings.oidc_key_algorithm)
    keyring = sealing.keyring_for(settings)

    async def run(db: Database) -> Any:
        return await db.transaction(
            lambda tx: tx.oidc_keys.rotate(chosen, keyring, ahead_s=ahead_s, overlap_s=overlap_s)
        )

    rotated = run_command(run)
    if as_json:
        click.echo(
            json.dumps({"newest": _key_json(rotated.newest), "retired": rotated.retired, "deleted": rotated.deleted})
        )
        return
    new = rotated.newest
    click.echo(f"new        {new.key_id} ({new.algorithm}), published now, signs from {new.signs_from.isoformat()}")
    for key_id in rotated.retired:
        click.echo(f"replaced   {key_id}, signs until then and stays published {overlap_s:g}s longer")


@click.command("oidc-keys")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def db_oidc_keys(as_json: bool) -> None:
    """List the published identity-token keys, newest first (a rotation's next key, the signing one, then
    replaced ones in their overlap)."""

    async def run(db: Database) -> Any:
        async def read(tx: Store) -> Any:
            return await tx.oidc_keys.published()

        return await db.transaction(read)

    keys = run_command(run)
    if as_json:
        click.echo(json.dumps([_key_json(k) for k in keys]))
        return
    click.echo(f"{'KEY ID':<18} {'ALG':<6} {'SIGNS FROM':<33} UNPUBLISHED AT")
    for k in keys:
        click.echo(
            f"{k.key_id:<18} {k.algorithm:<6} {k.signs_from.isoformat():<33} "
            f"{k.retire_at.isoformat() if k.retire_at else '-'}"
        )
