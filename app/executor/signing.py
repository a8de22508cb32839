"""Signing HTTP deliveries (``Kairos-Signature``) with the tenant's sealed secrets.

The header format and the receivers' verifier are defined once, in the tenant SDK
(``kairos_sdk.signature``), so the server signs exactly what tenants check. What is signed with
comes from the leased row's ``signing_secret``: sealed (``app.store.sealing``), holding the current
secret and, during a rotation's overlap window, the previous one, so a delivery then carries two
``v1=`` values. Opening a sealed value costs a Fernet decryption; each distinct stored value is
opened once per process and kept (a rotation stores a new value, so nothing stale is kept).

Here too: what ``kairos executor`` does with the secrets when it starts (``prepare``: the keyring
must be configured, and rows from before migration 0011 are sealed) and what
``kairos db reseal-secrets`` does after a key rotation (``reseal_all``).
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from uuid import UUID

from app.config import Settings
from app.store import Database, Store, sealing
from kairos_sdk.signature import sign as sign_with

log = logging.getLogger(__name__)

__all__ = ["SealResult", "prepare", "reseal_all", "seal_plaintext", "sign"]

# Opened secrets kept per process: more distinct stored values than this (tenants x rotations) start over.
OPENED_MAX = 10_000
_opened: dict[str, sealing.SigningSecrets] = {}


def opened(stored: str, keyring: sealing.Keyring | None = None) -> sealing.SigningSecrets:
    """The secrets in a ``tenants.signing_secret`` value, opened once and then kept."""
    found = _opened.get(stored)
    if found is None:
        found = (keyring or sealing.current()).open(stored)
        if len(_opened) >= OPENED_MAX:
            _opened.clear()
        _opened[stored] = found
    return found


def sign(stored: str, body: bytes, *, now: float | None = None) -> str:
    """The ``Kairos-Signature`` value for ``body``: one ``v1`` per secret active at ``now`` (default: the clock)."""
    t = int(time.time() if now is None else now)
    return sign_with(_active(stored, t), body, t)


@functools.lru_cache(maxsize=1024)  # per (tenant's stored secrets, second): a herd signs many bodies in one
def _active(stored: str, t: int) -> tuple[str, ...]:
    return opened(stored).active(datetime.fromtimestamp(t, timezone.utc))


@dataclass(frozen=True)
class SealResult:
    sealed: int  # plaintext rows sealed
    resealed: int = 0  # rows moved to the first key


async def seal_plaintext(db: Database, keyring: sealing.Keyring | None = None) -> int:
    """Seal every signing secret still stored in plaintext, a batch per transaction; how many were."""
    keyring = keyring or sealing.current()
    total = 0
    while True:

        async def work(tx: Store) -> int:
            return await tx.tenants.seal_plaintext_signing_secrets(keyring)

        sealed = await db.transaction(work)
        total += sealed
        if sealed < sealing.SEAL_BATCH_DEFAULT:
            return total


async def reseal_all(db: Database, keyring: sealing.Keyring | None = None) -> SealResult:
    """Seal plaintext rows, then re-seal under the first key whatever an older key sealed (after putting a new
    key first in KAIROS_SECRET_KEY; the older key may be dropped once this is done)."""
    keyring = keyring or sealing.current()
    sealed = await seal_plaintext(db, keyring)
    resealed, after = 0, None
    while True:

        async def work(tx: Store, start: UUID | None = after) -> tuple[int, UUID | None]:
            return await tx.tenants.reseal_signing_secrets(start, keyring)

        count, after = await db.transaction(work)
        resealed += count
        if after is None:
            return SealResult(sealed, resealed)


async def prepare(settings: Settings, db: Database) -> None:
    """At executor start: the keyring must open (else InvalidSetting ends the process with one line),
    and signing secrets from before migration 0011 are sealed now rather than left in plaintext."""
    keyring = sealing.keyring_for(settings)
    sealed = await seal_plaintext(db, keyring)
    if sealed:
        log.info("signing secrets sealed", extra={"tenants": sealed})
