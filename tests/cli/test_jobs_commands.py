"""`kairos jobs ...` against a real API: every command, --json documents, cursors, and the exit codes."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest

from tests.api.conftest import ApiProcess, TenantKey, query
from tests.cli.conftest import Kairos, child, closed_url


def submit_cron(kairos: Kairos, name: str = "digest", *extra: str) -> str:
    made = kairos(
        "jobs",
        "submit",
        "--name",
        name,
        "--cron",
        "0 9 * * MON-FRI",
        "--tz",
        "Europe/London",
        "--pool",
        "emails",
        "--payload",
        '{"to": "all"}',
        "--json",
        *extra,
    )
    assert made.code == 0, made.err
    return made.json()["jobId"]


def test_submit_show_ls_pause_resume_cancel(kairos: Kairos) -> None:
    job_id = submit_cron(
        kairos, "digest", "--jitter", "5m", "--max-attempts", "3", "--backoff", "30s", "--concurrency", "forbid"
    )
    shown = kairos("jobs", "show", job_id, "--json")
    assert shown.code == 0, shown.err
    job = shown.json()
    assert job["schedule"]["cron"] == "0 9 * * MON-FRI" and job["schedule"]["tz"] == "Europe/London"
    assert job["schedule"]["jitterSeconds"] == 300 and job["retry"]["maxAttempts"] == 3
    assert job["retry"]["backoffSeconds"] == 30 and job["concurrency"] == "forbid"
    assert (job["target"]["type"], job["target"]["ref"]) == ("queue", "emails") and job["payload"] == {"to": "all"}
    human = kairos("jobs", "show", job_id)
    assert human.code == 0 and "0 9 * * MON-FRI (Europe/London)" in human.out and "pool emails" in human.out

    listed = kairos("jobs", "ls", "--json")
    assert [j["jobId"] for j in listed.json()["jobs"]] == [job_id] and listed.json()["nextCursor"] is None
    table = kairos("jobs", "ls")
    assert job_id in table.out and "digest" in table.out and "active" in table.out

    paused = kairos("jobs", "pause", job_id, "--json")
    assert paused.code == 0 and paused.json()["state"] == "paused" and paused.json()["nextRunAt"] is None
    assert [j["jobId"] for j in kairos("jobs", "ls", "--state", "paused", "--json").json()["jobs"]] == [job_id]
    assert kairos("jobs", "ls", "--state", "active", "--json").json()["jobs"] == []
    resumed = kairos("jobs", "resume", job_id, "--missed", "run_once")
    assert resumed.code == 0 and f"resumed {job_id} (digest): active" in resumed.out
    cancelled = kairos("jobs", "cancel", job_id, "--json")
    assert cancelled.code == 0 and cancelled.json()["state"] == "cancelled"
    again = kairos("jobs", "pause", job_id)
    assert again.code == 2 and "cancelled job cannot be paused" in again.error_line


def test_one_off_jobs_from_flags_and_files(kairos: Kairos, tmp_path: Path) -> None:
    soon = kairos("jobs", "submit", "--name", "soon", "--in", "1h30m", "--url", "https://example.com/hook", "--json")
    assert soon.code == 0, soon.err
    at = kairos("jobs", "submit", "--name", "at", "--at", "2030-01-01T09:00:00+01:00", "--pool", "p")
    assert at.code == 0 and at.out.startswith("submitted ") and "next run 2030-01-01 08:00:00Z" in at.out
    body = {
        "name": "from-file",
        "target": {"type": "queue", "ref": "p"},
        "schedule": {"delaySeconds": 60},
        "payload": {"n": 1},
    }
    path = tmp_path / "job.json"
    path.write_text(json.dumps(body))
    by_file = kairos("jobs", "submit", "--file", str(path), "--idempotency-key", "k-1", "--json")
    by_stdin = kairos("jobs", "submit", "--file", "-", "--idempotency-key", "k-1", "--json", stdin=json.dumps(body))
    assert by_file.code == by_stdin.code == 0, by_file.err + by_stdin.err
    assert by_file.json()["jobId"] == by_stdin.json()["jobId"]  # the same key returns the same job
    conflict = kairos(
        "jobs", "submit", "--file", "-", "--idempotency-key", "k-1", stdin=json.dumps({**body, "payload": {"n": 2}})
    )
    assert conflict.code == 2 and "Idempotency-Key was already used" in conflict.error_line
    names = {j["name"] for j in kairos("jobs", "ls", "--json").json()["jobs"]}
    assert names == {"soon", "at", "from-file"}
    [job] = kairos("jobs", "ls", "--name", "soon", "--json").json()["jobs"]
    assert (job["target"]["type"], job["target"]["ref"]) == ("http", "https://example.com/hook")


def test_an_array_file_is_one_batch_and_ls_all_follows_cursors(kairos: Kairos, tmp_path: Path) -> None:
    items = [
        {"name": "bulk", "target": {"type": "queue", "ref": "p"}, "schedule": {"delaySeconds": 600 + i}}
        for i in range(7)
    ]
    items.append({"name": "bad", "target": {"type": "queue", "ref": "p"}, "schedule": {"delaySeconds": -1}})
    path = tmp_path / "jobs.json"
    path.write_text(json.dumps(items))
    batch = kairos("jobs", "submit", "--file", str(path), "--json")
    assert batch.code == 2 and batch.err.strip() == "error: 1 of 8 jobs refused"
    results = batch.json()["results"]
    assert all("jobId" in r for r in results[:7]) and results[7]["error"]["field"] == "/jobs/7/schedule/delaySeconds"

    first = kairos("jobs", "ls", "--name", "bulk", "--limit", "3", "--json").json()
    assert len(first["jobs"]) == 3 and first["nextCursor"]
    hint = kairos("jobs", "ls", "--name", "bulk", "--limit", "3")
    assert "3 shown; more with --all or --cursor" in hint.err
    rest = kairos("jobs", "ls", "--name", "bulk", "--limit", "3", "--cursor", first["nextCursor"], "--json").json()
    every = kairos("jobs", "ls", "--name", "bulk", "--limit", "3", "--all", "--json").json()
    assert every["nextCursor"] is None and len(every["jobs"]) == 7
    assert [j["jobId"] for j in every["jobs"]][:6] == [j["jobId"] for j in first["jobs"] + rest["jobs"]]
    assert len({j["jobId"] for j in every["jobs"]}) == 7


def test_history_and_attempts(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    from tests.cli.test_dead_letters_commands import dead_executions

    job_id = submit_cron(kairos, "flaky")
    [execution_id] = dead_executions(cli_api.database_url, tenant, job_id, 1, error="exit 65")
    history = kairos("jobs", "history", job_id, "--json")
    assert history.code == 0, history.err
    [execution] = history.json()["executions"]
    assert execution["executionId"] == execution_id and execution["state"] == "dead"
    assert execution["error"] == "exit 65"
    assert execution_id in kairos("jobs", "history", job_id).out
    attempts = kairos("jobs", "attempts", execution_id, "--json")
    assert [(a["attempt"], a["outcome"], a["workerId"]) for a in attempts.json()["attempts"]] == [
        (1, "failed", "cli-test")
    ]
    assert "cli-test" in kairos("jobs", "attempts", execution_id).out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("jobs", "ls", "--state", "sleeping"), "Invalid value for '--state'"),
        (("jobs", "ls", "--limit", "0"), "Invalid value for '--limit'"),
        (("jobs", "submit", "--name", "x", "--in", "9 parsecs", "--pool", "p"), "is not a duration"),
        (
            (
                "jobs",
                "submit",
                "--name",
                "x",
                "--cron",
                "* * * * *",
                "--tz",
                "UTC",
                "--at",
                "2030-01-01T00:00:00Z",
                "--pool",
                "p",
            ),
            "not --cron and --at",
        ),
        (("jobs", "submit", "--name", "x", "--cron", "* * * * *", "--pool", "p"), "--cron needs --tz"),
        (("jobs", "submit", "--name", "x", "--cron", "61 * * * *", "--tz", "UTC", "--pool", "p"), "--cron: '61'"),
        (
            ("jobs", "submit", "--name", "x", "--cron", "0 9 * * *", "--tz", "Mars/Base", "--pool", "p"),
            "--tz: unknown time zone",
        ),
        (("jobs", "submit", "--name", "x", "--at", "2030-01-01T09:00", "--pool", "p"), "needs an offset"),
        (("jobs", "submit", "--name", "x", "--in", "1m", "--pool", "p", "--url", "https://e.com"), "not both"),
        (("jobs", "submit", "--name", "x", "--in", "1m"), "give one of --pool NAME or --url URL"),
        (("jobs", "submit", "--name", "x", "--in", "1m", "--url", "ftp://e.com"), "--url:"),
        (("jobs", "submit", "--name", "x", "--in", "1m", "--pool", "no spaces"), "--pool: a pool is NAME"),
        (("jobs", "submit", "--name", "x", "--in", "1m", "--pool", "p", "--payload", "{nope"), "is not JSON"),
        (("jobs", "submit", "--name", "x", "--in", "1m", "--pool", "p", "--tz", "UTC"), "only apply to --cron"),
        (("jobs", "submit", "--in", "1m", "--pool", "p"), "--name is required"),
        (("jobs", "submit", "--file", "-", "--name", "x"), "leave out --name"),
        (("jobs", "show", "not-a-uuid"), "is not a job id"),
        (("jobs", "attempts", "42"), "is not a execution id"),
        (("jobs", "resume", "0b7c1e9e-95a1-4b7a-9a57-0f5d2b0e8c11", "--missed", "all"), "Invalid value for '--missed'"),
        (("jobs", "frobnicate"), "No such command"),
    ],
)
def test_bad_input_exits_2_with_one_line_before_any_request(
    kairos: Kairos, args: tuple[str, ...], message: str
) -> None:
    # Nothing listens at the API URL: a command that sent a request would fail with exit code 1.
    result = kairos(*args, env={"KAIROS_API_URL": closed_url()})
    assert result.code == 2, result
    assert message in result.error_line
    assert result.out == ""


def test_api_problems_exit_2_with_their_title_detail_and_field(kairos: Kairos, tmp_path: Path) -> None:
    missing = kairos("jobs", "show", "0b7c1e9e-95a1-4b7a-9a57-0f5d2b0e8c11")
    assert (missing.code, missing.error_line) == (2, "error: No such job")
    path = tmp_path / "job.json"
    path.write_text(
        json.dumps(
            {
                "name": "x",
                "target": {"type": "queue", "ref": "p"},
                "schedule": {"delaySeconds": 60},
                "retry": {"maxAttempts": 0},
            }
        )
    )
    invalid = kairos("jobs", "submit", "--file", str(path))
    assert invalid.code == 2
    assert invalid.error_line == "error: The request is invalid: must be between 1 and 100 (field /retry/maxAttempts)"
    bad_key = kairos("jobs", "ls", env={"KAIROS_API_KEY": "kairos_nope"})
    assert bad_key.code == 2 and bad_key.error_line.startswith("error: A valid API key is required")
    assert "unknown or revoked" in bad_key.error_line
    no_key = kairos("jobs", "ls", env={"KAIROS_API_KEY": None})
    assert no_key.code == 2 and "no API key: set KAIROS_API_KEY or pass --api-key" in no_key.error_line


def test_group_options_override_the_environment(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    job_id = submit_cron(kairos)
    result = kairos(
        "jobs",
        "--api-url",
        cli_api.url,
        "--api-key",
        tenant.key,
        "show",
        job_id,
        "--json",
        env={"KAIROS_API_URL": closed_url(), "KAIROS_API_KEY": None},
    )
    assert result.code == 0 and result.json()["jobId"] == job_id


def test_an_unreachable_api_exits_1_with_one_line_and_no_traceback(tenant: TenantKey) -> None:
    url = closed_url()
    result = child("jobs", "ls", env={"KAIROS_API_URL": url, "KAIROS_API_KEY": tenant.key})
    assert result.returncode == 1, result
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert result.stderr.startswith(f"error: cannot reach the Kairos API at {url}: ")
    assert "Traceback" not in result.stderr and result.stdout == ""


class _Failing(BaseHTTPRequestHandler):
    """A server whose database is gone: what a proxy or a failing API replica answers."""

    def do_GET(self) -> None:
        body = json.dumps(
            {
                "type": "https://kairos.dev/problems/database-unavailable",
                "status": 503,
                "title": "The database is unreachable.",
                "detail": "connection refused",
                "instance": self.path,
            }
        ).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/problem+json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def failing_api() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Failing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_5xx_problem_exits_1_with_one_line(kairos: Kairos, failing_api: str) -> None:
    # The real API answers 503 only with its database down; a stand-in answers the same body.
    result = kairos("jobs", "ls", env={"KAIROS_API_URL": failing_api})
    assert result.code == 1 and result.error_line == "error: The database is unreachable: connection refused"


def test_the_console_entry_point_lists_jobs(kairos: Kairos, cli_api: ApiProcess, tenant: TenantKey) -> None:
    job_id = submit_cron(kairos, "printed")
    result = child("jobs", "ls", env={"KAIROS_API_URL": cli_api.url, "KAIROS_API_KEY": tenant.key})
    assert result.returncode == 0, result.stderr
    assert job_id in result.stdout and "printed" in result.stdout
    rows = query(cli_api.database_url, "SELECT name FROM jobs WHERE tenant_id = %s", (str(tenant.tenant_id),))
    assert rows == [("printed",)]
