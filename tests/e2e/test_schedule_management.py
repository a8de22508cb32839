"""Schedules a tenant manages, through `kairos up`: interval schedules, dry runs, run now, updates, and a
job whose execution is dead reading `failed`; the scheduler and the executor do the work."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Request, endpoint, kairos_up
from tests.support.polling import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[Request]]]:
    """/ok answers 200, /gone answers 410 (not retried: dead at once)."""
    with endpoint(lambda r: 410 if r.path.startswith("/gone") else 200) as served:
        yield served


def test_interval_dry_run_run_now_update_and_failed_state_through_kairos_up(tmp_path: Path, receiver) -> None:
    base, received = receiver
    with (
        kairos_up(tmp_path, KAIROS_HTTP_EGRESS_ALLOW="127.0.0.1") as up,
        httpx.Client(base_url=up.api, headers=up.headers, timeout=10) as api,
    ):
        start = (datetime.now(timezone.utc) + timedelta(seconds=3)).replace(microsecond=0)

        def submit(name: str, **fields) -> str:
            body = {
                "name": name,
                "target": {"type": "http", "ref": f"{base}/ok/{name}"},
                "payload": {"n": name},
                "retry": {"maxAttempts": 1},
                **fields,
            }
            resp = api.post("/v1/jobs", json=body)
            assert resp.status_code == 201, resp.text
            return resp.json()["jobId"]

        every = submit("every", schedule={"every": "10s", "startAt": start.isoformat()})
        shadow = submit("shadow", schedule={"every": "10s", "startAt": start.isoformat()}, dryRun=True)
        gone = api.post(
            "/v1/jobs",
            json={
                "name": "gone",
                "target": {"type": "http", "ref": f"{base}/gone"},
                "schedule": {"delaySeconds": 0},
                "retry": {"maxAttempts": 3},
            },
        ).json()["jobId"]
        manual = submit(
            "manual",
            schedule={"cron": "0 0 1 1 *", "tz": "UTC"},
            target={"type": "http", "ref": f"{base}/ok/manual", "method": "PUT"},
        )

        def history(job_id: str) -> list[dict]:
            return api.get(f"/v1/jobs/{job_id}/executions").json()

        # The 410 is dead at once: the one-off reads failed, not completed.
        wait_for(
            lambda: api.get(f"/v1/jobs/{gone}").json()["state"] == "failed",
            timeout_s=30,
            interval_s=0.2,
            what="the dead one-off to read failed",
        )
        assert api.get(f"/v1/jobs/{gone}").json()["lastOutcome"] == "dead"
        assert gone in [j["jobId"] for j in api.get("/v1/jobs", params={"state": "failed"}).json()["jobs"]]
        # Run now: delivered with the job's method, outside its yearly schedule.
        assert api.post(f"/v1/jobs/{manual}:run").status_code == 202
        wait_for(
            lambda: ("PUT", "/ok/manual") in {(r.method, r.path) for r in received},
            timeout_s=30,
            interval_s=0.2,
            what="the manual run",
        )
        # The interval job runs on its grid; its dry-run twin is recorded at the same times, never sent.
        runs = wait_for(
            lambda: (h := [e for e in history(every) if e["state"] == "succeeded"]) and len(h) >= 2 and h,
            timeout_s=45,
            interval_s=0.3,
            what="two interval runs",
        )
        nominal = sorted(datetime.fromisoformat(e["scheduledFor"]) for e in runs)
        assert nominal[0] == start and nominal[1] - nominal[0] == timedelta(seconds=10)
        assert all(e["startLagMs"] is not None and e["startLagMs"] < 2000 for e in runs), runs
        # Each execution carries its attempts inline: one, succeeded, its request sent (an HTTP delivery's
        # start) when firstStartedAt says, at or after its lease.
        assert all([(t["attempt"], t["outcome"]) for t in e["attempts"]] == [(1, "succeeded")] for e in runs), runs
        assert all(e["attempts"][0]["sentAt"] == e["firstStartedAt"] for e in runs), runs
        assert all(
            datetime.fromisoformat(e["attempts"][0]["leasedAt"]) <= datetime.fromisoformat(e["attempts"][0]["sentAt"])
            for e in runs
        ), runs
        shadows = wait_for(lambda: (h := history(shadow)) and h, timeout_s=20, interval_s=0.3, what="dry-run records")
        assert {(e["state"], e["skipReason"]) for e in shadows} == {("skipped", "dry_run")}
        assert not [r for r in received if r.path == "/ok/shadow"]
        # Updating the interval moves the next occurrence onto the new step.
        moved = api.patch(f"/v1/jobs/{every}", json={"schedule": {"every": "1h"}})
        assert moved.status_code == 200, moved.text
        next_run = datetime.fromisoformat(moved.json()["nextRunAt"])
        assert (next_run - start) % timedelta(hours=1) == timedelta(0)
    assert up.proc.returncode == 0, up.text()[-3000:]
