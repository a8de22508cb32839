"""How ``kairos jobs`` prints jobs, executions and attempts as tables (``--json`` prints the API's answer)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from app.cli.client import Attempt, Execution, Job
from app.cli.remote import fields, stderr, table, when


def schedule_text(job: Job) -> str:
    s = job["schedule"]
    if s.get("cron"):
        return f"{s['cron']} ({s.get('tz')})"
    if s.get("every"):
        return f"every {s['every']}" + (f" ({s['tz']})" if s.get("tz") else "")
    return f"at {when(s.get('runAt'))}"


def bounds_text(job: Job) -> str | None:
    """A recurring job's startAt/endAt, when it has either."""
    s = job["schedule"]
    start, end = s.get("startAt"), s.get("endAt")
    if not start and not end:
        return None
    return f"{when(start) if start else '-'} to {when(end) if end else '-'}"


def labels_text(job: Job) -> str:
    labels: dict[str, str] = job.get("labels") or {}
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()))


def target_text(job: Job) -> str:
    t = job["target"]
    if t["type"] == "queue":
        return f"pool {t['ref']}"
    method = t.get("method")
    return f"{method} {t['ref']}" if method and method != "POST" else t["ref"]


def show_jobs(rows: Sequence[Job], *, title: str | None = None) -> None:
    table(
        ["ID", "NAME", "STATE", "SCHEDULE", "TARGET", "LABELS", "NEXT RUN"],
        [
            (
                j["jobId"],
                j["name"],
                j["state"] + (" (dry run)" if j.get("dryRun") else ""),
                schedule_text(j),
                target_text(j),
                labels_text(j),
                when(j["nextRunAt"]),
            )
            for j in rows
        ],
        title=title,
    )


def _auth_text(auth: dict[str, Any] | None) -> str | None:
    if not auth:
        return None
    return f"{auth['type']} token, audience {auth.get('audience') or 'the URL'}"


def _runs_text(job: Job) -> str | None:
    limit = job.get("maxRuns")
    return None if limit is None else f"{job.get('remainingRuns')} of {limit} (maxRuns)"


def _removal_text(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    return f"{seconds}s after it completes or is cancelled (then archived)"


def _waiting(job: Job) -> list[tuple[str, Any]]:
    """A buffer_one job's occurrence waiting for the running one (bufferedAt), when one waits."""
    at = job.get("bufferedAt")
    return [("waiting", f"the occurrence due {when(at)} starts when the running one settles")] if at else []


def show_job(job: Job) -> None:
    retry = job["retry"]
    headers: dict[str, str] = job["target"].get("headers") or {}
    pairs: list[tuple[str, Any]] = [
        ("id", job["jobId"]),
        ("name", job["name"]),
        ("state", job["state"]),
        ("schedule", schedule_text(job)),
        ("bounds", bounds_text(job)),
        ("target", target_text(job)),
        ("method", job["target"].get("method") if job["target"]["type"] == "http" else None),
        ("headers", ", ".join(f"{k}: {v}" for k, v in headers.items()) or None),
        ("auth", _auth_text(job["target"].get("auth"))),
        ("labels", labels_text(job) or None),
        ("next run", when(job["nextRunAt"])),
        ("paused at", when(job["pausedAt"]) if job["pausedAt"] else None),
        ("paused because", job.get("pausedReason")),
        ("on failure", "pause the job" if job.get("pauseOnFailure") else None),
        ("runs left", _runs_text(job)),
        ("remove after", _removal_text(job.get("deleteAfterCompletionSeconds"))),
        (
            "retry",
            (
                f"{retry['maxAttempts']} attempts, backoff {retry['backoffSeconds']:g}s "
                f"up to {retry['maxBackoffSeconds']:g}s"
            ),
        ),
        ("timeout", f"{job['timeoutSeconds']}s"),
        ("concurrency", job["concurrency"]),
        *_waiting(job),
        ("misfire", job["misfire"]),
        ("payload", json.dumps(job["payload"])),
        ("created", when(job["createdAt"])),
        ("updated", when(job["updatedAt"])),
        ("version", job["version"]),
    ]
    if job.get("dryRun"):
        pairs.insert(3, ("dry run", "yes: occurrences are recorded, never delivered"))
    fields(pairs)


def show_executions(rows: Sequence[Execution], *, title: str | None = None) -> None:
    table(
        ["EXECUTION", "SCHEDULED FOR", "STATE", "ATTEMPT", "STARTED", "FINISHED", "ERROR"],
        [
            (
                e["executionId"],
                when(e["scheduledFor"]),
                e["state"] + (" (paused the job)" if e.get("pausedJob") else ""),
                e["attempt"],
                when(e["startedAt"]),
                when(e["finishedAt"]),
                e["error"],
            )
            for e in rows
        ],
        title=title,
    )


def show_attempts(rows: Sequence[Attempt]) -> None:
    table(
        ["ATTEMPT", "WORKER", "LEASED", "FINISHED", "OUTCOME", "ERROR"],
        [
            (a["attempt"], a["workerId"], when(a["leasedAt"]), when(a["finishedAt"]), a["outcome"], a["error"])
            for a in rows
        ],
    )


def more_hint(cursor: str | None, shown: int) -> None:
    if cursor:
        stderr.print(f"[dim]{shown} shown; more with --all or --cursor {cursor}[/]", soft_wrap=True)


# -- submit --------------------------------------------------------------------------------------------
