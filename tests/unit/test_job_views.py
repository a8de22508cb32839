"""A stored job converts to the wire by field name (app.api.jobs.views): its answer shows every column the
wire names, and its submit body builds the same job again."""

from __future__ import annotations

from datetime import datetime, timezone
from uuid import uuid4

import msgspec
import pytest

from app.api.jobs import schemas, service, views
from app.api.jobs.submit import Submission, new_job_row
from app.config import load
from app.domain import jobs as job_rules
from app.domain.states import JobState
from app.store import jobs as jobs_store

NOW = datetime(2026, 10, 16, 9, 0, tzinfo=timezone.utc)
TENANT = uuid4()

BODIES = {
    "once": {"runAt": "2026-10-16T10:00:00Z"},
    "every": {"every": "15m", "jitterSeconds": 30, "startAt": "2026-10-16T09:30:00Z", "endAt": "2026-10-20T00:00:00Z"},
    "cron": {
        "cron": "0 9 * * 1-5",
        "tz": "Europe/London",
        "jitterSeconds": 60,
        "dst": {"gap": "skip", "repeat": "twice"},
        "endAt": "2027-01-01T00:00:00Z",
    },
}


def stored(kind: str, target: dict[str, object]) -> jobs_store.Job:
    body = msgspec.convert(
        {
            "name": f"{kind}-job",
            "target": target,
            "schedule": BODIES[kind],
            "payload": {"k": [1, None]},
            "labels": {"team": "a"},
            "timeoutSeconds": 60,
            "retry": {"maxAttempts": 3, "backoffSeconds": 5, "maxRetryDurationSeconds": 600},
            "concurrency": "forbid",
            "misfire": "skip",
            "dryRun": True,
        },
        schemas.JobIn,
    )
    spec = service.build_spec(body, load(), NOW)
    row = new_job_row(Submission(spec, TENANT, None, None), job_rules.queue_for(spec.target, TENANT))
    return jobs_store.Job(
        **{f.name: getattr(row, f.name) for f in msgspec.structs.fields(row)},
        state=JobState.ACTIVE,
        first_run_at=row.next_run_at,
        paused_at=None,
        version=1,
        created_at=NOW,
        updated_at=NOW,
    )


TARGETS: list[dict[str, object]] = [
    {"type": "http", "ref": "https://example.com/hook", "method": "PUT", "headers": {"X-A": "b"}},
    {"type": "queue", "ref": "emails"},
]


@pytest.mark.parametrize("kind", sorted(BODIES))
@pytest.mark.parametrize("target", TARGETS, ids=["http", "queue"])
def test_a_stored_jobs_body_builds_the_same_job(kind: str, target: dict[str, object]) -> None:
    job = stored(kind, target)
    again = service.build_spec(
        msgspec.convert(views.job_as_body(job), schemas.JobIn),
        load(),
        NOW,
        job_id=job.job_id,
        every_anchor=job.anchor_at,
    )
    row = new_job_row(Submission(again, TENANT, None, None), job.queue)
    changed = {k for k, v in msgspec.structs.asdict(row).items() if k != "payload_json" and getattr(job, k) != v}
    assert changed == set()


@pytest.mark.parametrize("kind", sorted(BODIES))
def test_the_answer_shows_the_columns_the_wire_names(kind: str) -> None:
    job = stored(kind, TARGETS[0])
    out = msgspec.to_builtins(views.job_out(job))
    assert (out["jobId"], out["name"], out["state"]) == (str(job.job_id), job.name, "active")
    assert out["target"] == {
        "type": "http",
        "ref": "https://example.com/hook",
        "method": "PUT",
        "headers": {"X-A": "b"},
    }
    assert out["retry"] == {
        "maxAttempts": 3,
        "backoffSeconds": 5.0,
        "maxBackoffSeconds": 3600.0,
        "maxRetryDurationSeconds": 600.0,
    }
    assert (out["timeoutSeconds"], out["concurrency"], out["misfire"], out["dryRun"], out["labels"]) == (
        60,
        "forbid",
        "skip",
        True,
        {"team": "a"},
    )
    schedule = out["schedule"]
    assert schedule["jitterSeconds"] == (None if kind == "once" else job.jitter_s)
    assert schedule["dst"] == ({"gap": "skip", "repeat": "twice"} if kind == "cron" else None)
    assert schedule["every"] == ("15m" if kind == "every" else None)
    assert out["nextRunAt"] == job.next_run_at.isoformat().replace("+00:00", "Z")
    assert out["executions"] is None
