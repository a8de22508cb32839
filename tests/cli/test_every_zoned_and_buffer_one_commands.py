"""`kairos jobs submit --every 1d --tz ZONE` (wall-clock days) and `--concurrency buffer_one`, shown by jobs show."""

from __future__ import annotations

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
