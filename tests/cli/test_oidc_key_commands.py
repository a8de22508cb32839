"""`kairos db rotate-oidc-key|oidc-keys`, the first key made by `kairos db upgrade`, and the keys' re-seal
under a new KAIROS_SECRET_KEY."""

from __future__ import annotations

import json
import os

import pytest

from tests.cli.test_signing_secret_commands import Run, kairos_db  # noqa: F401 (a fixture)


def test_upgrade_makes_the_first_key_and_a_rotation_publishes_the_next_ahead(kairos_db: Run) -> None:  # noqa: F811
    assert kairos_db("db", "upgrade").code == 0
    [first] = json.loads(kairos_db("db", "oidc-keys", "--json").out)
    assert first["algorithm"] == "ES256" and first["retireAt"] is None
    assert kairos_db("db", "upgrade").code == 0  # a second upgrade keeps it
    assert [k["keyId"] for k in json.loads(kairos_db("db", "oidc-keys", "--json").out)] == [first["keyId"]]

    rotated = kairos_db(
        "db", "rotate-oidc-key", "--algorithm", "rs256", "--publish-ahead", "10m", "--overlap", "1h", "--json"
    )
    assert rotated.code == 0, rotated.err
    result = json.loads(rotated.out)
    assert result["retired"] == [first["keyId"]] and result["newest"]["algorithm"] == "RS256"
    keys = json.loads(kairos_db("db", "oidc-keys", "--json").out)
    assert [k["keyId"] for k in keys] == [result["newest"]["keyId"], first["keyId"]]
    assert keys[1]["retireAt"] is not None and keys[1]["retireAt"] > keys[0]["signsFrom"]
    assert "RS256" in kairos_db("db", "oidc-keys").out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--overlap", "1m"), "--overlap must be between"),
        (("--publish-ahead", "60d"), "--publish-ahead must be between"),
        (("--algorithm", "HS256"), "HS256"),
    ],
)
def test_bad_rotation_input_exits_2_and_changes_nothing(
    kairos_db: Run,  # noqa: F811
    args: tuple[str, ...],
    message: str,
) -> None:
    assert kairos_db("db", "upgrade").code == 0
    before = kairos_db("db", "oidc-keys", "--json").out
    result = kairos_db("db", "rotate-oidc-key", *args)
    assert result.code == 2 and message in result.err, result.err
    assert kairos_db("db", "oidc-keys", "--json").out == before


def test_reseal_secrets_moves_the_keys_to_the_new_secret_key(kairos_db: Run) -> None:  # noqa: F811
    from cryptography.fernet import Fernet

    assert kairos_db("db", "upgrade").code == 0
    new_key, old_key = Fernet.generate_key().decode(), os.environ["KAIROS_SECRET_KEY"]
    resealed = kairos_db("db", "reseal-secrets", env={"KAIROS_SECRET_KEY": f"{new_key},{old_key}"})
    assert resealed.code == 0 and "re-sealed 1 identity-token key(s)" in resealed.out
    # Under the new key alone the key still opens: a rotation reads nothing sealed, so check by re-sealing.
    again = kairos_db("db", "reseal-secrets", env={"KAIROS_SECRET_KEY": new_key})
    assert again.code == 0 and "re-sealed 0 identity-token key(s)" in again.out
