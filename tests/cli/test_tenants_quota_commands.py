"""`kairos tenants set-quota --max-active-jobs N --max-submit-per-s N`: set, show, clear, enforced by the
API; bad input exits 2 with one line and changes nothing."""

from __future__ import annotations

import pytest

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.cli.conftest import Kairos, child


def quotas(api: ApiProcess, tenant: TenantKey) -> tuple:
    return query(
        api.database_url,
        "SELECT weight, max_inflight, max_dispatch_per_s, max_active_jobs, "
        "max_submit_per_s FROM tenants WHERE tenant_id = %s",
        (tenant.tenant_id,),
    )[0]


def test_set_show_and_clear_the_submit_quotas(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    db = {"KAIROS_DATABASE_URL": cli_api.database_url}
    made = kairos(
        "tenants", "set-quota", tenant.name, "--max-active-jobs", "2", "--max-submit-per-s", "50", "--json", env=db
    )
    assert made.code == 0, made.err
    assert made.json()["maxActiveJobs"] == 2 and made.json()["maxSubmitPerSecond"] == 50
    assert quotas(cli_api, tenant)[3:] == (2, 50)
    shown = kairos("tenants", "show", tenant.name, "--json", env=db)
    assert shown.json()["maxActiveJobs"] == 2 and shown.json()["maxSubmitPerSecond"] == 50
    listed = [line for line in kairos("tenants", "list", "--json", env=db).out.splitlines() if tenant.name in line]
    assert '"maxActiveJobs": 2' in listed[0]

    # The API enforces it: two jobs, then the third is refused and the command says so on one line.
    for i in range(2):
        assert kairos("jobs", "submit", "--name", f"j{i}", "--pool", "p", "--in", "1h").code == 0
    refused = kairos("jobs", "submit", "--name", "j2", "--pool", "p", "--in", "1h")
    assert refused.code == 2 and "2 active jobs" in refused.error_line
    assert query(cli_api.database_url, "SELECT count(*) FROM jobs WHERE tenant_id = %s", (tenant.tenant_id,))[0][0] == 2

    # Setting one leaves the other as it is; `none` clears.
    kept = kairos("tenants", "set-quota", tenant.name, "--max-active-jobs", "none", "--json", env=db)
    assert kept.code == 0 and kept.json()["maxActiveJobs"] is None and kept.json()["maxSubmitPerSecond"] == 50
    assert quotas(cli_api, tenant)[3:] == (None, 50)
    weighted = kairos("tenants", "set-quota", tenant.name, "--weight", "2", "--json", env=db)
    assert weighted.json()["maxSubmitPerSecond"] == 50


def test_set_and_clear_the_manual_run_quotas(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    db = {"KAIROS_DATABASE_URL": cli_api.database_url}
    made = kairos(
        "tenants", "set-quota", tenant.name, "--max-manual-per-s", "5", "--max-manual-inflight", "20", "--json", env=db
    )
    assert made.code == 0, made.err
    assert made.json()["maxManualRunsPerSecond"] == 5 and made.json()["maxManualInFlight"] == 20
    assert query(
        cli_api.database_url,
        "SELECT max_manual_per_s, max_manual_inflight FROM tenants WHERE tenant_id = %s",
        (tenant.tenant_id,),
    )[0] == (5, 20)
    cleared = kairos("tenants", "set-quota", tenant.name, "--max-manual-per-s", "none", "--json", env=db)
    assert cleared.json()["maxManualRunsPerSecond"] is None and cleared.json()["maxManualInFlight"] == 20
    bad = kairos("tenants", "set-quota", tenant.name, "--max-manual-inflight", "0", env=db)
    assert bad.code == 2 and bad.error_line and bad.out == ""


@pytest.mark.parametrize(
    "args",
    [
        ("--max-active-jobs", "0"),
        ("--max-active-jobs", "-3"),
        ("--max-active-jobs", "abc"),
        ("--max-active-jobs", "1.5"),
        ("--max-submit-per-s", "0"),
        ("--max-submit-per-s", "1000001"),
        ("--max-submit-per-s", ""),
        ("--max-active-jobs",),
        (),
    ],
)
def test_bad_quota_input_exits_2_with_one_line_and_changes_nothing(
    kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey, args: tuple[str, ...]
) -> None:
    db = {"KAIROS_DATABASE_URL": cli_api.database_url}
    assert kairos("tenants", "set-quota", tenant.name, "--max-active-jobs", "7", env=db).code == 0
    before = quotas(cli_api, tenant)
    result = kairos("tenants", "set-quota", tenant.name, *args, env=db)
    assert result.code == 2, (args, result.out, result.err)
    assert result.error_line
    assert result.out == ""
    assert quotas(cli_api, tenant) == before


def test_an_unknown_tenant_exits_2(kairos: Kairos, cli_api: ApiProcess) -> None:
    result = kairos(
        "tenants",
        "set-quota",
        "nobody-at-all",
        "--max-active-jobs",
        "3",
        env={"KAIROS_DATABASE_URL": cli_api.database_url},
    )
    assert result.code == 2 and "nobody-at-all" in result.error_line


def test_a_terminal_sees_one_line(cli_api: ApiProcess, tenant: TenantKey) -> None:
    done = child(
        "tenants",
        "set-quota",
        tenant.name,
        "--max-submit-per-s",
        "many",
        env={"KAIROS_DATABASE_URL": cli_api.database_url},
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: Invalid value for '--max-submit-per-s': 'many' is not an integer 1-1000000 or none"
    ]
