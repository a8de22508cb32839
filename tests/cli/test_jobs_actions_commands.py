"""`kairos jobs update|run|backfill` and the list filters against a real API."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from tests.api.conftest import ApiProcess, query
from tests.cli.conftest import Kairos
from tests.cli.test_jobs_commands import submit_cron


def test_update_changes_fields_labels_and_schedule(kairos: Kairos) -> None:
    job_id = submit_cron(kairos, "digest")
    out = kairos(
        "jobs", "update", job_id, "--name", "digest-v2", "--cron", "30 8 * * *", "--label", "team=mail", "--json"
    )
    assert out.code == 0, out.err
    job = out.json()
    assert (job["name"], job["schedule"]["cron"], job["schedule"]["tz"], job["labels"]) == (
        "digest-v2",
        "30 8 * * *",
        "Europe/London",
        {"team": "mail"},
    )
    assert [j["jobId"] for j in kairos("jobs", "ls", "--label", "team:mail", "--json").json()["jobs"]] == [job_id]
    assert [j["jobId"] for j in kairos("jobs", "ls", "--name-prefix", "digest-", "--json").json()["jobs"]] == [job_id]
    removed = kairos(
        "jobs", "update", job_id, "--label", "team=", "--patch", '{"retry": {"maxAttempts": 2}}', "--json"
    ).json()
    assert removed["labels"] == {} and removed["retry"]["maxAttempts"] == 2
    stale = kairos("jobs", "update", job_id, "--name", "x", "--if-version", "1")
    assert stale.code == 2 and "version" in stale.error_line
    bad = kairos("jobs", "update", job_id, "--cron", "61 * * * *")
    assert bad.code == 2 and "schedule" in bad.error_line
    assert kairos("jobs", "show", job_id, "--json").json()["name"] == "digest-v2"


@pytest.mark.parametrize(
    "args",
    [
        ("jobs", "update", "00000000-0000-4000-8000-000000000001"),
        ("jobs", "update", "00000000-0000-4000-8000-000000000001", "--label", "no-equals"),
        ("jobs", "update", "00000000-0000-4000-8000-000000000001", "--cron", "* * * * *", "--every", "1h"),
        ("jobs", "run", "00000000-0000-4000-8000-000000000001", "--overlap", "sometimes"),
        (
            "jobs",
            "backfill",
            "00000000-0000-4000-8000-000000000001",
            "--from",
            "2026-01-02T00:00:00Z",
            "--to",
            "2026-01-01T00:00:00Z",
        ),
        ("jobs", "backfill", "00000000-0000-4000-8000-000000000001", "--from", "yesterday", "--to", "now"),
        ("jobs", "ls", "--label", "team in mail"),
    ],
)
def test_bad_input_exits_2_with_one_line(kairos: Kairos, args: tuple[str, ...]) -> None:
    result = kairos(*args)
    assert result.code == 2 and result.error_line


def test_run_now_and_backfill(kairos: Kairos, cli_api: ApiProcess) -> None:
    job_id = kairos(
        "jobs", "submit", "--name", "hourly", "--cron", "0 * * * *", "--tz", "UTC", "--pool", "p", "--json"
    ).json()["jobId"]
    ran = kairos("jobs", "run", job_id, "--json")
    assert ran.code == 0, ran.err
    execution_id = ran.json()["executionId"]
    assert query(cli_api.database_url, "SELECT trigger FROM executions WHERE execution_id = %s", (execution_id,)) == [
        ("manual",)
    ]
    busy = kairos("jobs", "run", job_id, "--overlap", "forbid")
    assert busy.code == 2 and "forbid" in busy.error_line
    hour = datetime.now(timezone.utc).replace(minute=0, second=0, microsecond=0)
    start, end = (hour - timedelta(hours=30)).isoformat(), (hour - timedelta(minutes=1)).isoformat()
    filled = kairos("jobs", "backfill", job_id, "--from", start, "--to", end, "--json")
    assert filled.code == 0, filled.err
    assert filled.json() == {"created": 30, "existing": 0}
    again = kairos("jobs", "backfill", job_id, "--from", start, "--to", end)
    assert again.code == 0 and "0 created, 30 already there" in again.out
