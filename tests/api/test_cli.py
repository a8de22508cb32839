"""The `kairos` command line, run as a real process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.api.conftest import query


def kairos(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KAIROS_DATABASE_URL": database_url, "KAIROS_LOG_LEVEL": "WARNING"}
    return subprocess.run([sys.executable, "-m", "app.cli", *args], env=env, capture_output=True, text=True, timeout=60)


def test_tenants_create_rotate_quota_show(database_url: str) -> None:
    made = kairos(database_url, "tenants", "create", "acme", "--json")
    assert made.returncode == 0, made.stderr
    out = json.loads(made.stdout)
    assert set(out) == {"tenantId", "name", "apiKey", "signingSecret"}
    stored = query(database_url, "SELECT key_hash FROM api_keys WHERE tenant_id = %s", (out["tenantId"],))
    assert len(stored) == 1 and out["apiKey"] not in stored[0][0]  # only the hash is stored

    dup = kairos(database_url, "tenants", "create", "acme")
    assert dup.returncode == 2 and dup.stderr.strip().count("\n") == 0 and "already exists" in dup.stderr

    rotated = kairos(database_url, "tenants", "rotate-key", "acme", "--json")
    assert rotated.returncode == 0
    assert json.loads(rotated.stdout)["revoked"] == 1
    live = query(
        database_url, "SELECT count(*) FROM api_keys WHERE tenant_id = %s AND revoked_at IS NULL", (out["tenantId"],)
    )
    assert live[0][0] == 1

    quota = kairos(database_url, "tenants", "set-quota", "acme", "--weight", "3", "--max-inflight", "20")
    assert quota.returncode == 0, quota.stderr
    shown = json.loads(kairos(database_url, "tenants", "show", "acme", "--json").stdout)
    assert (shown["weight"], shown["maxInflight"]) == (3, 20)


@pytest.mark.parametrize(
    "args",
    [
        ("tenants", "show", "nobody"),
        ("tenants", "rotate-key", "nobody"),
        ("tenants", "set-quota", "nobody", "--weight", "2"),
        ("tenants", "set-quota", "acme"),
        ("tenants", "set-quota", "acme", "--weight", "0"),
        ("tenants", "create", ""),
    ],
)
def test_bad_cli_input_exits_2_with_one_line_and_changes_nothing(database_url: str, args: tuple[str, ...]) -> None:
    kairos(database_url, "tenants", "create", "acme")
    before = query(database_url, "SELECT name, weight, max_inflight FROM tenants ORDER BY name")
    result = kairos(database_url, *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ")
    assert query(database_url, "SELECT name, weight, max_inflight FROM tenants ORDER BY name") == before


def test_db_upgrade_is_idempotent(database_url: str) -> None:
    first = kairos(database_url, "db", "upgrade")
    assert first.returncode == 0 and "applied 0 migration(s)" in first.stdout
