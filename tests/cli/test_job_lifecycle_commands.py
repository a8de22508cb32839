"""`kairos jobs submit` and `jobs show` with a job's lifecycle options: pause on failure, a run limit, removal."""

from __future__ import annotations

from tests.api.conftest import ApiProcess, query
from tests.cli.conftest import Kairos, closed_url


def test_submit_flags_set_the_lifecycle_options_and_show_prints_them(kairos: Kairos, cli_api: ApiProcess) -> None:
    made = kairos(
        "jobs", "submit", "--name", "sync", "--every", "15m", "--pool", "p",
        "--pause-on-failure", "--max-runs", "4", "--delete-after", "1d", "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    job_id = made.json()["jobId"]
    job = kairos("jobs", "show", job_id, "--json").json()
    assert (job["pauseOnFailure"], job["maxRuns"], job["remainingRuns"]) == (True, 4, 4)
    assert job["deleteAfterCompletionSeconds"] == 86400
    human = kairos("jobs", "show", job_id).out
    assert "pause the job" in human and "4 of 4 (maxRuns)" in human and "86400s after it completes" in human
    reason = f"pauseOnFailure: execution {job_id} was dead-lettered after 1 attempt: HTTP 500"
    query(
        cli_api.database_url,
        "UPDATE jobs SET state = 'paused', paused_at = now(), paused_reason = %s, next_run_at = NULL WHERE job_id = %s",
        (reason, job_id),
    )
    assert "HTTP 500" in kairos("jobs", "show", job_id).out.replace("\n", " ")
    query(
        cli_api.database_url,
        """INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
                                   finished_at, error)
           SELECT job_id, tenant_id, queue, now() - interval '1 hour', 1, 1, 'dead', now(), now(), 'HTTP 500'
           FROM jobs WHERE job_id = %s""",
        (job_id,),
    )
    query(
        cli_api.database_url,
        "UPDATE jobs SET pause_execution_id = (SELECT execution_id FROM executions WHERE job_id = %s) "
        "WHERE job_id = %s",
        (job_id, job_id),
    )
    assert "dead (paused the job)" in kairos("jobs", "history", job_id).out.replace("\n", " ")
    updated = kairos(
        "jobs", "update", job_id, "--max-runs", "9", "--no-pause-on-failure", "--delete-after", "2h", "--json"
    )  # fmt: skip
    assert updated.code == 0, updated.err
    assert (updated.json()["maxRuns"], updated.json()["pauseOnFailure"]) == (9, False)
    assert updated.json()["deleteAfterCompletionSeconds"] == 7200
    one_off = kairos("jobs", "submit", "--name", "once", "--in", "1h", "--pool", "p", "--delete-after", "0s", "--json")
    assert one_off.code == 0, one_off.err
    assert kairos("jobs", "show", one_off.json()["jobId"], "--json").json()["deleteAfterCompletionSeconds"] == 0


def test_recurring_only_flags_on_a_one_off_exit_2_before_any_request(kairos: Kairos) -> None:
    for flags in (("--pause-on-failure",), ("--max-runs", "3")):
        result = kairos(
            "jobs", "submit", "--name", "once", "--in", "1h", "--pool", "p", *flags,
            env={"KAIROS_API_URL": closed_url()},
        )  # fmt: skip
        assert result.code == 2, result
        assert flags[0] in result.error_line and "only apply to --cron or --every" in result.error_line
    zero = kairos("jobs", "submit", "--name", "x", "--every", "1h", "--pool", "p", "--max-runs", "0")
    assert zero.code == 2 and "--max-runs" in zero.err


def test_a_removal_delay_past_366_days_names_the_flag_before_any_request(kairos: Kairos) -> None:
    for command in (
        ("jobs", "submit", "--name", "x", "--every", "1h", "--pool", "p", "--delete-after", "367d"),
        ("jobs", "update", "00000000-0000-4000-8000-000000000000", "--delete-after", "367d"),
    ):
        result = kairos(*command, env={"KAIROS_API_URL": closed_url()})
        assert result.code == 2, result
        assert result.error_line.startswith("error:") and "--delete-after" in result.error_line
        assert "366" in result.error_line and len(result.err.strip().splitlines()) == 1


def test_a_label_key_given_twice_exits_2_instead_of_keeping_the_last(kairos: Kairos) -> None:
    for command in (
        ("jobs", "submit", "--name", "x", "--every", "1h", "--pool", "p", "--label", "team=a", "--label", "team=b"),
        ("jobs", "update", "00000000-0000-4000-8000-000000000000", "--label", "team=a", "--label", "team="),
    ):
        result = kairos(*command, env={"KAIROS_API_URL": closed_url()})
        assert result.code == 2, result
        assert "--label" in result.error_line and "team" in result.error_line and "twice" in result.error_line


def test_the_clis_removal_bound_is_the_apis() -> None:
    from app.cli.job_body import DELETE_AFTER_MAX_S
    from app.domain.jobs import MAX_DELETE_AFTER_S

    assert DELETE_AFTER_MAX_S == MAX_DELETE_AFTER_S
