"""`kairos status` against a real `kairos api`: tables for people, --json for scripts, one-line errors
(exit 2 for a problem answer or bad input, 1 for an API that cannot be reached)."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from tests.api.conftest import ApiProcess, TenantKey, make_tenant
from tests.conftest import free_port
from tests.support.cli import Result, child, run_kairos

ADMIN_TOKEN = "admin-" + uuid.uuid4().hex


@pytest.fixture(scope="module", autouse=True)
def admin_token_env() -> Iterator[None]:
    """The module's `kairos api` (the conftest's `api`, started after this) reads KAIROS_ADMIN_TOKEN."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KAIROS_ADMIN_TOKEN", ADMIN_TOKEN)
        yield


@pytest.fixture(scope="module")
def acme(api: ApiProcess) -> TenantKey:
    return make_tenant(api.database_url, f"acme-{uuid.uuid4().hex[:6]}")


Status = Callable[..., Result]


@pytest.fixture
def status(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Status:
    """``status(api_url, *args, **env)``: `kairos status ARGS` in this process, given only ``env`` (no KAIROS_*
    of the test process: KAIROS_ADMIN_TOKEN is set for `api`)."""

    def run(api_url: str, *args: str, **env: str) -> Result:
        clean: dict[str, str | None] = {k: None for k in os.environ if k.startswith("KAIROS_")}
        return run_kairos(monkeypatch, capsys, "status", *args, env={**clean, "KAIROS_API_URL": api_url, **env})

    return run


def test_a_tenant_key_gets_its_tables(api: ApiProcess, acme: TenantKey, status: Status) -> None:
    done = status(api.url, KAIROS_API_KEY=acme.key)
    assert done.code == 0, done.err
    assert f"Kairos status (tenant {acme.name})" in done.out
    for heading in ("start lag, last 5 min", "shards owned", "dead letters", "Queues", "no ready or leased work"):
        assert heading in done.out
    assert "Schedulers" not in done.out  # owners by name are for the operator


def test_json_is_the_body_of_get_v1_status(api: ApiProcess, acme: TenantKey, status: Status) -> None:
    done = status(api.url, "--json", KAIROS_API_KEY=acme.key)
    assert done.code == 0, done.err
    body = json.loads(done.out)
    assert body["scope"] == {"viewer": "tenant", "tenant": acme.name}
    assert set(body) == {"scope", "generatedAt", "shards", "startLag", "queues", "deadLetters"}

    admin = status(api.url, "--json", "--admin-token", ADMIN_TOKEN, "--tenant", acme.name)
    assert json.loads(admin.out)["scope"] == {"viewer": "admin", "tenant": acme.name}
    everyone = status(api.url, KAIROS_ADMIN_TOKEN=ADMIN_TOKEN)
    assert everyone.code == 0 and "operator, every tenant" in everyone.out and "Schedulers" in everyone.out


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        ((), {"KAIROS_API_KEY": "kairos_not-a-key"}, "error: 401 "),
        (("--admin-token", "wrong-" + uuid.uuid4().hex), {}, "error: 401 "),
        (("--admin-token", ADMIN_TOKEN, "--tenant", "nobody-" + uuid.uuid4().hex[:6]), {}, "error: 404 "),
        ((), {}, "error: give a tenant key"),
        (("--tenant", "acme"), {"KAIROS_API_KEY": "k"}, "error: --tenant needs the admin token"),
        (("--api-url", "ftp://example"), {"KAIROS_API_KEY": "k"}, "error: --api-url must be"),
    ],
)
def test_problems_and_bad_input_exit_2_with_one_line(
    api: ApiProcess, args: tuple[str, ...], env: dict[str, str], says: str, status: Status
) -> None:
    done = status(api.url, *args, **env)
    assert done.code == 2, done.err
    assert done.err.startswith(says) and done.err.count("\n") == 1, done.err
    assert done.out == ""


def test_an_unreachable_api_exits_1_with_one_line(status: Status) -> None:
    done = status(f"http://127.0.0.1:{free_port()}", KAIROS_API_KEY="kairos_x")
    assert done.code == 1
    assert done.err.startswith("error: cannot reach the Kairos API at http://127.0.0.1:") and (
        done.err.count("\n") == 1
    ), done.err


def test_the_installed_command_exits_with_those_codes(api: ApiProcess, acme: TenantKey) -> None:
    ok = child("status", "--json", env={"KAIROS_API_URL": api.url, "KAIROS_API_KEY": acme.key})
    assert ok.returncode == 0 and json.loads(ok.stdout)["scope"]["tenant"] == acme.name, ok.stderr
    refused = child("status", "--json", env={"KAIROS_API_URL": api.url, "KAIROS_API_KEY": "nope"})
    assert (refused.returncode, refused.stdout, refused.stderr.count("\n")) == (2, "", 1), refused.stderr
