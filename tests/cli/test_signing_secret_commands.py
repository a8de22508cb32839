"""`kairos tenants rotate-secret|show-secret` and `kairos db reseal-secrets|new-secret-key`.

Run through the console entry point in this process (exit codes and one-line errors are the real
ones) on the test's database; the embedded-mode key file through real child processes, since that
is about what separate `kairos` processes share.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import psycopg
import pytest
from cryptography.fernet import Fernet

from tests.support.cli import Result, child, run_kairos

Run = Callable[..., Result]


@pytest.fixture
def kairos_db(
    database_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[Run]:
    """``kairos_db(*args, env=None)``: the command line against the test's database, as an operator runs it."""
    monkeypatch.setenv("KAIROS_DATABASE_URL", database_url)
    monkeypatch.setenv("KAIROS_HOME", str(tmp_path / "home"))

    def run(*args: str, env: dict[str, str | None] | None = None) -> Result:
        return run_kairos(monkeypatch, capsys, *args, env=env)

    yield run


def stored_secret(database_url: str, name: str) -> str:
    url = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT signing_secret FROM tenants WHERE name = %s", (name,)).fetchone()
    assert row is not None
    return row[0]


def test_show_rotate_and_show_again(kairos_db: Run, database_url: str) -> None:
    created = kairos_db("tenants", "create", "acme", "--json")
    assert created.code == 0, created.err
    first = created.json()["signingSecret"]
    assert kairos_db("tenants", "show-secret", "acme").out.strip() == first
    assert first not in stored_secret(database_url, "acme")

    rotated = kairos_db("tenants", "rotate-secret", "acme", "--overlap", "2h", "--json")
    assert rotated.code == 0, rotated.err
    body = rotated.json()
    new = body["signingSecret"]
    assert new != first and body["name"] == "acme"
    until = datetime.fromisoformat(body["previousValidUntil"])
    assert timedelta(hours=2) - timedelta(minutes=1) < until - datetime.now(timezone.utc) <= timedelta(hours=2)
    assert kairos_db("tenants", "show-secret", "acme").out.strip() == new
    shown = kairos_db("tenants", "show-secret", "acme", "--json").json()
    assert shown["previousValidUntil"] == body["previousValidUntil"] and shown["rotatedAt"] == body["rotatedAt"]

    text = kairos_db("tenants", "rotate-secret", "acme", "--overlap", "0")
    assert text.code == 0 and "no longer signs" in text.out
    assert kairos_db("tenants", "show-secret", "acme", "--json").json()["previousValidUntil"] is None


def test_the_default_overlap_comes_from_the_setting(kairos_db: Run) -> None:
    assert kairos_db("tenants", "create", "acme").code == 0
    body = kairos_db(
        "tenants", "rotate-secret", "acme", "--json", env={"KAIROS_SIGNING_SECRET_OVERLAP_S": "600"}
    ).json()
    left = datetime.fromisoformat(body["previousValidUntil"]) - datetime.now(timezone.utc)
    assert timedelta(minutes=9) < left <= timedelta(minutes=10)


@pytest.mark.parametrize(
    "args, message",
    [
        (("tenants", "rotate-secret", "nobody"), "no tenant named 'nobody'"),
        (("tenants", "show-secret", "nobody"), "no tenant named 'nobody'"),
        (("tenants", "rotate-secret", "acme", "--overlap", "31d"), "--overlap must be between 0 and 30 days"),
        (("tenants", "rotate-secret", "acme", "--overlap", "soon"), "is not a duration"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_changes_nothing(
    kairos_db: Run, database_url: str, args: tuple[str, ...], message: str
) -> None:
    assert kairos_db("tenants", "create", "acme").code == 0
    before = stored_secret(database_url, "acme")
    result = kairos_db(*args)
    assert result.code == 2 and message in result.error_line
    assert stored_secret(database_url, "acme") == before


def test_a_database_url_without_a_secret_key_is_refused_before_anything_is_written(
    kairos_db: Run, database_url: str
) -> None:
    result = kairos_db("tenants", "create", "acme", env={"KAIROS_SECRET_KEY": None})
    assert result.code == 2 and "KAIROS_SECRET_KEY" in result.error_line
    assert kairos_db("tenants", "show-secret", "acme").code == 2  # no tenant was created
    bad = kairos_db("tenants", "show-secret", "acme", env={"KAIROS_SECRET_KEY": "not-a-key-" * 5})
    assert bad.code == 2 and "not-a-key" not in bad.err  # key material is never echoed


def test_the_secret_key_rotates_through_reseal_secrets(kairos_db: Run) -> None:
    assert kairos_db("tenants", "create", "acme").code == 0
    secret = kairos_db("tenants", "show-secret", "acme").out.strip()
    new_key = kairos_db("db", "new-secret-key").out.strip()
    Fernet(new_key)  # a valid key
    old_key = os.environ["KAIROS_SECRET_KEY"]
    resealed = kairos_db("db", "reseal-secrets", env={"KAIROS_SECRET_KEY": f"{new_key},{old_key}"})
    assert resealed.code == 0 and "re-sealed 1 under the first key" in resealed.out
    assert kairos_db("tenants", "show-secret", "acme", env={"KAIROS_SECRET_KEY": new_key}).out.strip() == secret
    wrong = kairos_db("tenants", "show-secret", "acme", env={"KAIROS_SECRET_KEY": old_key})
    assert wrong.code == 2 and "none of which opens them" in wrong.error_line


def test_the_embedded_mode_keeps_its_generated_key_in_kairos_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"KAIROS_HOME": str(home), "KAIROS_LOG_LEVEL": "WARNING"}
    created = child("tenants", "create", "acme", "--json", env=env)
    assert created.returncode == 0, created.stderr
    key_file = home / "secret.key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    Fernet(key_file.read_text().strip())
    # Another process opens it with the same key file.
    shown = child("tenants", "show-secret", "acme", env=env)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == json.loads(created.stdout)["signingSecret"]
