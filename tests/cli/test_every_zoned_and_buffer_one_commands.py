"""`kairos jobs submit --every 1d --tz ZONE` (wall-clock days) and `--concurrency buffer_one`, shown by jobs show,
with the occurrence a buffer_one job keeps waiting."""

from __future__ import annotations

from tests.api.conftest import ApiProcess, query
from tests.cli.conftest import Kairos


def test_a_zoned_every_job_with_buffer_one_from_flags(kairos: Kairos) -> None:
    made = kairos(
        "jobs", "submit", "--name", "nightly", "--every", "1d", "--tz", "Europe/London",
        "--start-at", "2030-03-30T01:30:00+01:00", "--dst-gap", "skip", "--concurrency", "buffer_one",
        "--pool", "reports", "--json",
    )  # fmt: skip
    assert made.code == 0, made.err
    job = kairos("jobs", "show", made.json()["jobId"], "--json").json()
    assert (job["schedule"]["every"], job["schedule"]["tz"]) == ("1d", "Europe/London")
    assert job["schedule"]["dst"]["gap"] == "skip" and job["concurrency"] == "buffer_one"
    human = kairos("jobs", "show", made.json()["jobId"])
    assert "every 1d (Europe/London)" in human.out and "buffer_one" in human.out


def test_a_zone_with_an_interval_of_hours_exits_2_before_any_request(kairos: Kairos) -> None:
    refused = kairos("jobs", "submit", "--name", "x", "--every", "6h", "--tz", "Europe/London", "--pool", "p")
    assert refused.code == 2 and "whole days" in refused.err and len(refused.err.strip().splitlines()) == 1
    no_zone = kairos("jobs", "submit", "--name", "x", "--every", "1d", "--dst-gap", "skip", "--pool", "p")
    assert no_zone.code == 2 and "--tz" in no_zone.err


def test_jobs_show_prints_the_occurrence_a_buffer_one_job_keeps_waiting(kairos: Kairos, cli_api: ApiProcess) -> None:
    made = kairos(
        "jobs", "submit", "--name", "sync", "--every", "15m", "--concurrency", "buffer_one", "--pool", "p", "--json"
    )
    assert made.code == 0, made.err
    job_id = made.json()["jobId"]
    assert "waiting" not in kairos("jobs", "show", job_id).out  # none waits: no line for it
    # The scheduler writes it when an occurrence falls due while the previous one runs; none runs here.
    query(cli_api.database_url, "UPDATE jobs SET buffered_at = '2030-01-01T09:00:00Z' WHERE job_id = %s", (job_id,))
    shown = kairos("jobs", "show", job_id)
    assert shown.code == 0, shown.err
    [line] = [line for line in shown.out.splitlines() if line.startswith("waiting")]
    assert "the occurrence due 2030-01-01 09:00:00Z starts when the running one settles" in line
