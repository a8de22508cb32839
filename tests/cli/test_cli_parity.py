"""The CLI says what the API can: every-schedules, labels, bounds, dry run, method and headers at submit and
in `jobs ls`/`jobs show`; tables for `tenants`; a line when `history list` or `pools list` find nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.api.conftest import ApiProcess, TenantKey
from tests.cli.conftest import Kairos, closed_url
from tests.conftest import fresh_database


def test_submit_takes_every_label_bounds_dry_run_method_and_headers(kairos: Kairos) -> None:
    made = kairos(
        "jobs",
        "submit",
        "--name",
        "sync",
        "--every",
        "15m",
        "--label",
        "team=payments",
        "--label",
        "env=prod",
        "--start-at",
        "2030-01-01T00:00:00Z",
        "--end-at",
        "2030-06-01T00:00:00Z",
        "--url",
        "https://example.com/hook",
        "--method",
        "PUT",
        "--header",
        "X-Env: prod",
        "--header",
        "X-Team:payments",
        "--dry-run",
        "--json",
    )
    assert made.code == 0, made.err
    job = kairos("jobs", "show", made.json()["jobId"], "--json").json()
    assert job["schedule"]["every"] == "15m"
    assert (job["schedule"]["startAt"], job["schedule"]["endAt"]) == ("2030-01-01T00:00:00Z", "2030-06-01T00:00:00Z")
    assert job["labels"] == {"team": "payments", "env": "prod"} and job["dryRun"] is True
    assert job["target"]["method"] == "PUT" and job["target"]["headers"] == {"X-Env": "prod", "X-Team": "payments"}

    shown = kairos("jobs", "show", job["jobId"]).out
    for text in (
        "every 15m",
        "2030-01-01 00:00:00Z",
        "2030-06-01 00:00:00Z",
        "env=prod, team=payments",
        "PUT",
        "X-Env: prod",
        "X-Team: payments",
    ):
        assert text in shown, (text, shown)
    listed = kairos("jobs", "ls").out
    assert "every 15m" in listed and "at -" not in listed and "env=prod, team=payments" in listed, listed


def test_submit_asks_for_an_identity_token(kairos: Kairos) -> None:
    made = kairos(
        "jobs",
        "submit",
        "--name",
        "hook",
        "--in",
        "5m",
        "--url",
        "https://example.com/hook",
        "--oidc-audience",
        "https://example.com",
        "--json",
    )
    assert made.code == 0, made.err
    job = kairos("jobs", "show", made.json()["jobId"], "--json").json()
    assert job["target"]["auth"] == {"type": "oidc", "audience": "https://example.com"}
    assert "oidc token, audience https://example.com" in kairos("jobs", "show", job["jobId"]).out
    plain = kairos(
        "jobs", "submit", "--name", "hook", "--in", "5m", "--url", "https://example.com/hook", "--oidc", "--json"
    )
    assert kairos("jobs", "show", plain.json()["jobId"], "--json").json()["target"]["auth"] == {"type": "oidc"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--every", "15m", "--cron", "* * * * *", "--tz", "UTC", "--pool", "p"), "not --cron and --every"),
        (("--every", "15m", "--pool", "p", "--method", "PUT"), "--method"),
        (("--every", "15m", "--pool", "p", "--header", "X: y"), "--header"),
        (("--every", "15m", "--url", "https://example.com/h", "--header", "no-colon"), "NAME: VALUE"),
        (("--every", "15m", "--pool", "p", "--oidc"), "--oidc"),
        (("--every", "15m", "--pool", "p", "--oidc-audience", "x"), "--oidc-audience"),
        (("--every", "15m", "--pool", "p", "--label", "team"), "KEY=VALUE"),
        (("--every", "soon", "--pool", "p"), "--every"),
        (("--in", "5m", "--pool", "p", "--start-at", "2030-01-01T00:00:00Z"), "--start-at"),
    ],
)
def test_submit_flags_that_do_not_fit_exit_2_with_one_line(kairos: Kairos, args: tuple[str, ...], message: str) -> None:
    result = kairos("jobs", "submit", "--name", "x", *args, env={"KAIROS_API_URL": closed_url()})
    assert result.code == 2 and message in result.error_line, result.err


def test_tenant_commands_print_tables(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    db = {"KAIROS_DATABASE_URL": cli_api.database_url, "KAIROS_LOG_LEVEL": "WARNING"}
    made = kairos("tenants", "set-quota", tenant.name, "--max-active-jobs", "9", env=db)
    assert made.code == 0, made.err
    assert not made.out.lstrip().startswith("{") and "max active jobs" in made.out and "9" in made.out
    shown = kairos("tenants", "show", tenant.name, env=db)
    assert not shown.out.lstrip().startswith("{") and tenant.name in shown.out and "weight" in shown.out
    listed = kairos("tenants", "list", env=db)
    header = listed.out.splitlines()[0]
    assert header.split()[:2] == ["NAME", "ID"] and "MAX ACTIVE JOBS" in header
    assert any(line.startswith(tenant.name) for line in listed.out.splitlines())


def test_history_list_and_pools_list_say_when_there_is_nothing(
    kairos: Kairos, tmp_path: Path, pg_base_url: str, pg_template: str
) -> None:
    with fresh_database(pg_base_url, pg_template) as url:
        env = {
            "KAIROS_DATABASE_URL": url,
            "KAIROS_HOME": str(tmp_path / "home"),
            "KAIROS_LOG_LEVEL": "WARNING",
            "KAIROS_ARCHIVE_URL": None,
        }
        pools = kairos("pools", "list", env=env)
        assert pools.code == 0 and pools.out.strip().startswith("no shared pools"), pools.out + pools.err
        history = kairos("history", "list", env=env)
        assert history.code == 0 and history.out.strip().startswith("no archives"), history.out + history.err


def test_jobs_ls_takes_label_selectors(kairos: Kairos) -> None:
    for name, label in (("x", "team=a"), ("y", "team=b")):
        assert kairos("jobs", "submit", "--name", name, "--in", "1h", "--pool", "p", "--label", label).code == 0
    listed = kairos("jobs", "ls", "--label", "team notin (a)", "--json")
    assert listed.code == 0, listed.err
    assert [j["name"] for j in listed.json()["jobs"]] == ["y"]
    bad = kairos("jobs", "ls", "--label", "team in a", env={"KAIROS_API_URL": closed_url()})
    assert bad.code == 2 and "--label" in bad.error_line
