"""Tenants' HTTP signing secrets: sealed at rest, rotatable with an overlap window.

Found in review: ``tenants.signing_secret`` held the secret in plaintext (anyone reading the
database or a backup could forge deliveries) and nothing could rotate it. Deliveries go through
the real HTTP pool to a real local endpoint; the database is read raw, as an intruder would.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import text

from app.config import InvalidSetting, Settings, load
from app.executor import signing
from app.executor.http_pool import HTTP_QUEUE
from app.store import sealing
from app.store.db import Database
from kairos_sdk.signature import verify
from tests import factories as tf
from tests.integration.test_http_pool import Target, make_pool, target  # noqa: F401  (fixture)


async def stored_row(db: Database, tenant_id) -> str:
    """The tenant's whole row as text, as a database dump would show it."""

    async def read(conn):
        return (
            await conn.execute(
                text("SELECT CAST(row_to_json(t) AS TEXT) FROM tenants AS t WHERE tenant_id = :t"), {"t": tenant_id}
            )
        ).scalar_one()

    return await tf.raw(db, read)


async def deliver(db: Database, t: tf.TenantFixture, target: Target, payload: dict) -> tuple[str, bytes]:
    """One delivery of a new job of ``t`` through the HTTP pool: the Kairos-Signature header and the body."""
    job = await tf.job(db, t.tenant_id, queue=HTTP_QUEUE, target_ref=target.url, payload=payload)
    await tf.ready_executions(db, job)
    pool = make_pool(db)
    try:
        await pool.run_once()
    finally:
        await pool.close()
    req = target.requests[-1]
    headers = {k.lower(): v for k, v in req["headers"].items()}
    return headers["kairos-signature"], req["body"]


async def test_the_signing_secret_is_not_stored_in_plaintext(db: Database) -> None:
    t = await tf.tenant(db)
    row = await stored_row(db, t.tenant_id)
    assert len(t.signing_secret) == 64
    assert t.signing_secret not in row
    assert json.loads(row)["signing_secret"].startswith(sealing.SEALED_PREFIX)
    # Another key cannot open it: the ciphertext alone is worth nothing.
    other = sealing.Keyring([Fernet.generate_key().decode()])
    with pytest.raises(InvalidSetting) as err:
        other.open(json.loads(row)["signing_secret"])
    assert "KAIROS_SECRET_KEY" in str(err.value)


async def test_rotation_signs_with_both_secrets_for_the_overlap_then_with_the_new_one_only(
    db: Database, target: Target
) -> None:
    t = await tf.tenant(db)
    old = t.signing_secret
    rotated = await db.transaction(lambda tx: tx.tenants.rotate_signing_secret(t.tenant_id, 86400))
    new = rotated.secrets.current
    assert new != old and rotated.secrets.previous == old and rotated.rotated_at is not None
    assert new not in await stored_row(db, t.tenant_id) and old not in await stored_row(db, t.tenant_id)

    header, body = await deliver(db, t, target, {"n": 1})
    assert header.count("v1=") == 2
    assert verify(new, header, body) and verify(old, header, body)  # receivers on either secret accept it
    assert not verify("not-the-secret", header, body)

    # Rotated 25 h ago with a 24 h overlap: the window is over, only the new secret signs.
    later = await db.transaction(
        lambda tx: tx.tenants.rotate_signing_secret(
            t.tenant_id, 86400, now=datetime.now(timezone.utc) - timedelta(hours=25)
        )
    )
    header, body = await deliver(db, t, target, {"n": 2})
    assert header.count("v1=") == 1
    assert verify(later.secrets.current, header, body)
    assert not verify(new, header, body) and not verify(old, header, body)


async def test_rotation_without_overlap_and_show_secret(db: Database) -> None:
    t = await tf.tenant(db)
    got = await db.transaction(lambda tx: tx.tenants.rotate_signing_secret(t.tenant_id, 0))
    assert got.secrets.previous is None
    assert got.secrets.active(datetime.now(timezone.utc)) == (got.secrets.current,)
    shown = await db.transaction(lambda tx: tx.tenants.signing_secrets(t.tenant_id))
    assert shown.secrets.current == got.secrets.current and shown.rotated_at == got.rotated_at


async def test_plaintext_rows_from_before_0011_still_sign_and_are_sealed_when_the_executor_starts(
    db: Database, target: Target
) -> None:
    t = await tf.tenant(db)
    legacy = "ab" * 32

    async def as_before(conn) -> None:
        await conn.execute(
            text("UPDATE tenants SET signing_secret = :s WHERE tenant_id = :t"), {"s": legacy, "t": t.tenant_id}
        )

    await tf.raw(db, as_before)
    header, body = await deliver(db, t, target, {"n": 1})
    assert verify(legacy, header, body)

    await signing.prepare(load(), db)  # what `kairos executor` runs before serving
    row = await stored_row(db, t.tenant_id)
    assert legacy not in row and json.loads(row)["signing_secret"].startswith(sealing.SEALED_PREFIX)
    shown = await db.transaction(lambda tx: tx.tenants.signing_secrets(t.tenant_id))
    assert shown.secrets.current == legacy


async def test_the_secret_key_rotates_by_putting_a_new_key_first_and_resealing(db: Database) -> None:
    t = await tf.tenant(db)
    old_key, new_key = os.environ["KAIROS_SECRET_KEY"].split(",")[0], sealing.new_key()
    both = sealing.Keyring([new_key, old_key])
    result = await signing.reseal_all(db, both)
    assert result.resealed >= 1
    stored = json.loads(await stored_row(db, t.tenant_id))["signing_secret"]
    assert both.sealed_by_primary(stored)
    assert sealing.Keyring([new_key]).open(stored).current == t.signing_secret  # the old key may go now
    with pytest.raises(InvalidSetting):
        sealing.Keyring([old_key]).open(stored)
    assert (await signing.reseal_all(db, both)).resealed == 0  # nothing left to move


def test_the_embedded_mode_generates_one_private_key_file_even_when_processes_race(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path / "home")
    keys: list[str] = []

    def resolve() -> None:
        sealing._keyrings.clear()
        keys.append(sealing._read_or_create_key_file(settings.home / sealing.KEY_FILE))

    threads = [threading.Thread(target=resolve) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=10)
    path = settings.home / sealing.KEY_FILE
    assert len(set(keys)) == 1 and path.read_text().strip() == keys[0]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in settings.home.iterdir()) == [sealing.KEY_FILE]  # no scratch files left
    sealed = sealing.keyring_for(settings).seal(sealing.SigningSecrets("s"))
    assert sealing.Keyring([keys[0]]).open(sealed).current == "s"


def test_a_database_url_without_a_secret_key_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidSetting) as err:
        sealing.keyring_for(Settings(home=tmp_path, database_url="postgresql://db.example/kairos"))
    assert "KAIROS_SECRET_KEY" in str(err.value)
    assert not (tmp_path / sealing.KEY_FILE).exists()
