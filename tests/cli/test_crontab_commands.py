"""`kairos crontab import|compare`: a realistic crontab into a real API, twice, and the comparison with
classic cron across the 2027 US DST changes."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.cli.conftest import Kairos, closed_url

CRONTAB = r"""# Edit this file to introduce tasks to be run by cron.
# m h  dom mon dow   command
SHELL=/bin/bash
MAILTO="ops@example.com"
PATH = /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin
CRON_TZ=America/New_York

30 2 * * *   /usr/local/bin/backup.sh --full > /var/log/backup.log 2>&1
*/15 * * * * curl -fsS https://example.com/ping >/dev/null

@daily       find /tmp -type f -mtime +7 -delete
0 9 * * MON-FRI  mail -s "report $(date +\%F)" boss@example.com%Numbers attached.%-- cron
GREETING='hello world'
30 1 * * 0   echo "$GREETING"
"""


@pytest.fixture
def crontab(tmp_path: Path) -> Path:
    path = tmp_path / "crontab"
    path.write_text(CRONTAB)
    return path


def jobs_of(database_url: str, tenant: TenantKey) -> list[tuple[str, str, str]]:
    return query(
        database_url,
        "SELECT job_id::text, name, cron FROM jobs WHERE tenant_id = %s ORDER BY name",
        (str(tenant.tenant_id),),
    )


def test_dry_run_shows_each_job_with_its_next_three_fire_times_and_sends_nothing(kairos: Kairos, crontab: Path) -> None:
    result = kairos(
        "crontab", "import", str(crontab), "--pool", "cron", "--dry-run", "--json", env={"KAIROS_API_URL": closed_url()}
    )
    assert result.code == 0, result.err
    document = result.json()
    assert document["submitted"] is False
    assert [(j["line"], j["schedule"], j["tz"]) for j in document["jobs"]] == [
        (8, "30 2 * * *", "America/New_York"),
        (9, "*/15 * * * *", "America/New_York"),
        (11, "@daily", "America/New_York"),
        (12, "0 9 * * MON-FRI", "America/New_York"),
        (14, "30 1 * * 0", "America/New_York"),
    ]
    backup, ping, daily, mail, greeting = document["jobs"]
    assert all(len(j["nextFireTimes"]) == 3 for j in document["jobs"])
    assert all(t["local"].endswith(("02:30 EST", "02:30 EDT", "03:00 EDT")) for t in backup["nextFireTimes"])
    assert all(t["local"].split()[1] == "00:00" for t in daily["nextFireTimes"])
    assert [t["at"] for t in ping["nextFireTimes"]] == sorted(t["at"] for t in ping["nextFireTimes"])
    assert mail["job"]["payload"] == {
        "command": 'mail -s "report $(date +%F)" boss@example.com',
        "env": {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin"},
        "stdin": "Numbers attached.\n-- cron\n",
        "shell": "/bin/bash",
        "mailto": "ops@example.com",
    }
    assert greeting["job"]["payload"]["env"]["GREETING"] == "hello world"
    assert daily["job"]["schedule"] == {"cron": "@daily", "tz": "America/New_York"}
    assert daily["job"]["name"] == "crontab: find /tmp -type f -mtime +7 -delete"
    assert "dryRun" not in daily["job"]
    people = kairos(
        "crontab", "import", str(crontab), "--pool", "cron", "--dry-run", env={"KAIROS_API_URL": closed_url()}
    )
    assert people.code == 0 and "5 job(s) would be created; nothing was sent (--dry-run)" in people.out
    assert "NEXT 3 FIRE TIMES" in people.out and "/usr/local/bin/backup.sh --full" in people.out


def test_import_creates_the_jobs_once(kairos: Kairos, crontab: Path, cli_api: ApiProcess, tenant: TenantKey) -> None:
    first = kairos("crontab", "import", str(crontab), "--pool", "cron", "--json")
    assert first.code == 0, first.err
    ids = [j["jobId"] for j in first.json()["jobs"]]
    assert len(set(ids)) == 5 and all(ids)
    stored = jobs_of(cli_api.database_url, tenant)
    assert sorted(i for i, _, _ in stored) == sorted(ids)
    shown = kairos("jobs", "show", ids[3], "--json").json()
    assert shown["payload"]["command"] == 'mail -s "report $(date +%F)" boss@example.com'
    assert shown["schedule"]["cron"] == "0 9 * * MON-FRI" and shown["schedule"]["tz"] == "America/New_York"
    assert (shown["target"]["type"], shown["target"]["ref"]) == ("queue", "cron")

    again = kairos("crontab", "import", str(crontab), "--pool", "cron", "--json")
    assert again.code == 0, again.err
    assert [j["jobId"] for j in again.json()["jobs"]] == ids
    assert jobs_of(cli_api.database_url, tenant) == stored  # nothing new
    # Moving lines around and adding comments keeps each line's job.
    crontab.write_text(CRONTAB.replace("# m h", "# minute hour\n\n# m h"))
    moved = kairos("crontab", "import", str(crontab), "--pool", "cron", "--json")
    assert moved.code == 0 and sorted(j["jobId"] for j in moved.json()["jobs"]) == sorted(ids)
    human = kairos("crontab", "import", str(crontab), "--pool", "cron")
    assert "5 of 5 line(s) imported; a line imported before keeps its job" in human.out
    assert len(jobs_of(cli_api.database_url, tenant)) == 5


def test_a_line_whose_settings_changed_since_its_import_is_refused_by_number(
    kairos: Kairos, crontab: Path, cli_api: ApiProcess, tenant: TenantKey
) -> None:
    assert kairos("crontab", "import", str(crontab), "--pool", "cron").code == 0
    crontab.write_text(CRONTAB.replace("GREETING='hello world'", "GREETING='good night'"))
    changed = kairos("crontab", "import", str(crontab), "--pool", "cron")
    assert changed.code == 2
    assert changed.err.strip() == (
        f"error: {crontab}: line 14: This Idempotency-Key was already used with a "
        "different request body (the line was imported before with other settings: "
        "cancel that import's jobs and import again with --revision 2)"
    )
    assert len(jobs_of(cli_api.database_url, tenant)) == 5
    old = {name: job_id for job_id, name, _ in jobs_of(cli_api.database_url, tenant)}['crontab: echo "$GREETING"']
    assert kairos("jobs", "cancel", old).code == 0
    renewed = kairos("crontab", "import", str(crontab), "--pool", "cron", "--revision", "2", "--json")
    assert renewed.code == 0, renewed.err
    assert len(jobs_of(cli_api.database_url, tenant)) == 10  # --revision 2 is a new set of keys for every line


@pytest.mark.parametrize(
    ("extra", "line", "message"),
    [
        (
            "@reboot /usr/local/bin/start-queue\n",
            15,
            "@reboot runs when the machine boots, and Kairos has no boot event",
        ),
        ("0 25 * * * /bin/late\n", 15, "'25' in the hour field: 25 is out of range 0-23"),
        ("*/5 * * *\n", 15, "expected five time fields and a command"),
    ],
)
def test_a_refused_line_is_named_and_nothing_is_created(
    kairos: Kairos, crontab: Path, cli_api: ApiProcess, tenant: TenantKey, extra: str, line: int, message: str
) -> None:
    crontab.write_text(CRONTAB + extra)
    result = kairos("crontab", "import", str(crontab), "--pool", "cron")
    assert result.code == 2
    assert result.error_line.startswith(f"error: {crontab}: line {line}: {message}")
    assert jobs_of(cli_api.database_url, tenant) == []


def test_as_dry_run_jobs_are_marked_and_apart_from_real_ones(
    kairos: Kairos, crontab: Path, cli_api: ApiProcess, tenant: TenantKey
) -> None:
    schema = httpx.get(f"{cli_api.url}/schema/openapi.json", timeout=10).json()
    if "dryRun" not in schema["components"]["schemas"]["JobIn"]["properties"]:
        pytest.skip("this API has no dryRun field yet")
    trial = kairos(
        "crontab",
        "import",
        str(crontab),
        "--url",
        "https://example.com/cron",
        "--as-dry-run-jobs",
        "--name-prefix",
        "trial/",
        "--json",
    )
    assert trial.code == 0, trial.err
    assert all(j["job"]["dryRun"] is True for j in trial.json()["jobs"])
    shown = kairos("jobs", "show", trial.json()["jobs"][0]["jobId"], "--json").json()
    assert shown["dryRun"] is True and shown["name"].startswith("trial/")
    assert (shown["target"]["type"], shown["target"]["ref"]) == ("http", "https://example.com/cron")
    real = kairos("crontab", "import", str(crontab), "--url", "https://example.com/cron", "--json")
    assert real.code == 0, real.err
    assert not {j["jobId"] for j in real.json()["jobs"]} & {j["jobId"] for j in trial.json()["jobs"]}
    assert len(jobs_of(cli_api.database_url, tenant)) == 10


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--pool", "cron", "--url", "https://e.com"), "give one of --pool NAME or --url URL, not both"),
        ((), "give one of --pool NAME or --url URL"),
        (("--url", "file:///etc/passwd"), "--url: an http target needs"),
        (("--pool", "cron", "--tz", "Nowhere/Land"), "--tz: unknown time zone"),
    ],
)
def test_bad_import_flags_exit_2_before_any_request(
    kairos: Kairos, crontab: Path, args: tuple[str, ...], message: str
) -> None:
    result = kairos("crontab", "import", str(crontab), *args, env={"KAIROS_API_URL": closed_url()})
    assert result.code == 2 and message in result.error_line


def test_a_line_without_a_zone_needs_tz(kairos: Kairos, tmp_path: Path) -> None:
    path = tmp_path / "plain"
    path.write_text("MAILTO=\n0 4 * * * /usr/bin/updatedb\n")
    result = kairos("crontab", "import", str(path), "--pool", "cron", "--dry-run")
    assert result.code == 2
    assert result.error_line == f"error: {path}: line 2: no CRON_TZ or TZ above it: give the zone with --tz"
    zoned = kairos("crontab", "import", str(path), "--pool", "cron", "--dry-run", "--tz", "Europe/Paris", "--json")
    assert zoned.code == 0 and zoned.json()["jobs"][0]["tz"] == "Europe/Paris"
    assert zoned.json()["jobs"][0]["job"]["payload"] == {"command": "/usr/bin/updatedb", "env": {}, "mailto": ""}


def test_compare_across_the_us_dst_changes(kairos: Kairos, crontab: Path) -> None:
    crontab.write_text(CRONTAB + "0,30 2 * * * /usr/local/bin/twice-nightly\n*/20 1 * * * /usr/local/bin/poll\n")
    spring = kairos(
        "crontab",
        "compare",
        str(crontab),
        "--from",
        "2027-03-13",
        "--to",
        "2027-03-16",
        "--tz",
        "America/New_York",
        "--json",
    )
    assert spring.code == 0, spring.err
    lines = {item["line"]: item for item in spring.json()["lines"]}
    assert spring.json()["identical"] is False
    backup = lines[8]
    assert backup["identical"] and backup["classicRuns"] == backup["kairosRuns"] == 3
    assert [n["text"] for n in backup["notes"]] == [
        (
            "2027-03-14 02:30 America/New_York does not exist (clocks go from 02:00 to 03:00): classic cron runs it "
            "at 03:00 EDT (time jump), Kairos shifts it to 03:00 EDT"
        )
    ]
    twice = lines[15]
    assert not twice["identical"] and (twice["classicRuns"], twice["kairosRuns"]) == (6, 5)
    assert twice["notes"][0]["differs"] and twice["notes"][0]["text"].endswith(
        "at 03:00 EDT classic cron runs twice, Kairos once"
    )
    assert lines[11]["identical"] and lines[11]["notes"] == []

    fall = kairos("crontab", "compare", str(crontab), "--from", "2027-11-06", "--to", "2027-11-09")
    assert fall.code == 0, fall.err
    text = fall.out
    assert "line 8  30 2 * * *  America/New_York  /usr/local/bin/backup.sh" in text
    assert (
        "line 16  */20 1 * * *  America/New_York  /usr/local/bin/poll\n  differs (classic cron 12 runs, "
        "Kairos 9)\n  differs  2027-11-07 01:00, 01:20, 01:40 America/New_York occur twice (clocks go back "
        "from 02:00 to 01:00): classic cron runs them twice, in EDT and in EST (a job with * in its minute "
        "or hour field runs in both passes), Kairos once, in EDT (dst repeat: once)"
    ) in text
    assert (
        "2027-11-07 01:30 America/New_York occurs twice (clocks go back from 02:00 to 01:00): classic cron "
        "runs it once, at 01:30 EDT (a fixed-time job does not run again in the repeated hour), Kairos once, "
        "at 01:30 EDT (dst repeat: once)"
    ) in text
    skip = kairos(
        "crontab", "compare", str(crontab), "--from", "2027-03-14", "--to", "2027-03-15", "--dst-gap", "skip", "--json"
    )
    [note] = {i["line"]: i for i in skip.json()["lines"]}[8]["notes"]
    assert note["differs"] and note["text"].endswith(
        "Kairos skips it; at 03:00 EDT classic cron runs once, Kairos not at all"
    )


def test_compare_says_no_differences_when_identical(kairos: Kairos, tmp_path: Path) -> None:
    path = tmp_path / "utc"
    path.write_text("CRON_TZ=UTC\n*/7 * * * * /bin/a\n@monthly /bin/b\n")
    result = kairos("crontab", "compare", str(path), "--from", "2027-01-01", "--to", "2027-12-31")
    assert result.code == 0, result.err
    assert result.out.count("no differences") == 2 and "differs" not in result.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "2027-03-10", "--to", "2027-03-01"), "--to must be after --from"),
        (("--from", "2027-01-01", "--to", "2028-06-01"), "the range is at most 366 days"),
        (("--from", "soon", "--to", "2027-03-01"), "--from: 'soon' is not a date"),
        (("--from", "2027-01-01", "--to", "2027-02-01", "--daemon-tz", "Moon/Base"), "--daemon-tz: unknown"),
    ],
)
def test_bad_compare_ranges_exit_2(kairos: Kairos, crontab: Path, args: tuple[str, ...], message: str) -> None:
    result = kairos("crontab", "compare", str(crontab), *args)
    assert result.code == 2 and message in result.error_line


def test_skip_unsupported_imports_the_other_lines_and_lists_what_it_skipped(
    kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey, tmp_path: Path
) -> None:
    path = tmp_path / "crontab"
    path.write_text(
        "@reboot /usr/local/bin/start-agent\n0 3 * * * /usr/local/bin/nightly.sh\n"
        "@REBOOT sleep 60 && /usr/local/bin/warm-cache\n"
    )
    refused = kairos("crontab", "import", str(path), "--pool", "cron", "--tz", "UTC")
    assert refused.code == 2 and "line 1" in refused.error_line and "--skip-unsupported" in refused.error_line
    assert jobs_of(cli_api.database_url, tenant) == []

    done = kairos("crontab", "import", str(path), "--pool", "cron", "--tz", "UTC", "--skip-unsupported")
    assert done.code == 0, done.err
    [(_, name, cron)] = jobs_of(cli_api.database_url, tenant)
    assert (name, cron) == ("crontab: /usr/local/bin/nightly.sh", "0 3 * * *")
    assert "skipped line 1: @reboot /usr/local/bin/start-agent" in done.err
    assert "skipped line 3: @REBOOT sleep 60 && /usr/local/bin/warm-cache" in done.err
    assert "1 of 1 line(s) imported; 2 skipped" in done.out

    document = kairos(
        "crontab", "import", str(path), "--pool", "cron", "--tz", "UTC", "--skip-unsupported", "--dry-run", "--json"
    ).json()
    assert [(s["line"], s["text"]) for s in document["skipped"]] == [
        (1, "@reboot /usr/local/bin/start-agent"),
        (3, "@REBOOT sleep 60 && /usr/local/bin/warm-cache"),
    ]
    assert "boot" in document["skipped"][0]["reason"]
