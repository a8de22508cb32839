"""The descriptions of the body fields in the OpenAPI document (app.api.openapi), by component schema."""

from __future__ import annotations

from typing import Any

_TARGET = {
    "type": "http (an URL) or queue (a worker pool)",
    "ref": "the URL of an http target; the pool of a queue target: NAME (the tenant's own) or shared/NAME",
    "method": "http only: POST (default), PUT, PATCH or GET",
    "headers": "http only: headers sent with each delivery (Kairos's own, such as Kairos-Signature, win)",
    "auth": 'http only: {"type": "oidc"} sends each delivery with Authorization: Bearer <JWT>, an '
    "identity token Kairos signs (keys at /.well-known/jwks.json); null: none",
}
_TARGET_AUTH = {
    "type": "oidc: a short-lived JWT (iss, aud, sub = tenants/<tenant>/jobs/<job>, iat, exp)",
    "audience": "the token's aud; absent: the target's URL",
}
_SCHEDULE = {
    "runAt": "one-off: the instant to run at (ISO 8601 with an offset)",
    "delaySeconds": "one-off: run this many seconds after the submit",
    "cron": "recurring: a 5-field cron expression (names, ranges, steps, H tokens); needs tz",
    "cronResolved": "the expression the scheduler evaluates: H tokens, names and shorthands resolved for this job",
    "every": "recurring: an interval such as 90s, 15m, 1h30m or 1d, anchored at startAt (or one interval after "
    "the submit): elapsed time, or with tz whole days at the anchor's wall-clock time in that zone",
    "anchorAt": "every only: the instant the interval's grid is anchored at",
    "tz": "the IANA zone a cron expression is evaluated in, e.g. Europe/London (required with cron); with every, "
    "whole days only (1d, 7d), the zone whose wall-clock time each occurrence keeps across DST",
    "jitterSeconds": "recurring: a window after each nominal time; the job runs at its own stable offset in it",
    "dst": "cron, or every with tz: what a spring-forward gap and a fall-back repeat do to a fire time",
    "startAt": "recurring: no occurrence before this instant",
    "endAt": "recurring: no occurrence after this instant; the job completes after its last one",
}
_RETRY = {
    "maxAttempts": "attempts before the execution is dead-lettered (first run included)",
    "backoffSeconds": "delay before the first retry, doubled each attempt (with jitter)",
    "maxBackoffSeconds": "the longest delay between two attempts",
    "maxRetryDurationSeconds": "no retry starts this long after the first attempt",
}
_JOB = {
    "name": "a name for people; not unique",
    "target": "where each occurrence is delivered",
    "schedule": "when: exactly one of runAt, delaySeconds, cron (with tz) or every",
    "payload": "JSON delivered with each occurrence (as the HTTP body, or to the worker)",
    "retry": "how failures are retried before dead-lettering",
    "timeoutSeconds": "how long one attempt may run",
    "concurrency": "when an occurrence falls due while the previous one still runs: allow, forbid (skip it), "
    "replace (cancel the running one) or buffer_one (it waits and starts when the running one settles; one more "
    "due meanwhile is skipped)",
    "bufferedAt": "concurrency buffer_one: the nominal time of the occurrence waiting for the running one; it starts "
    "within a second after that one settles (succeeds, is dead-lettered or cancelled)",
    "misfire": "occurrences missed while Kairos was down: run_once (default), catch_up (each, up to 100) or skip",
    "labels": "key/value pairs to filter by: GET /v1/jobs?label= takes a selector as Kubernetes reads it: "
    "key:value (or key=value), key!=value, key in (a,b), key notin (a,b), key (has it), !key (has not)",
    "dryRun": "occurrences are recorded as skipped, never delivered",
    "jobId": "the job's id",
    "state": "active, paused, completed, failed (its only execution dead) or cancelled",
    "nextRunAt": "when the next occurrence runs (jitter included); null when none is due",
    "pausedAt": "when the job was paused",
    "createdAt": "when the job was submitted",
    "updatedAt": "when the job row last changed (a dispatch included)",
    "version": "counts the tenant's changes; the job's ETag (If-Match on PATCH)",
    "lastOutcome": "the state of the newest finished execution: succeeded, dead, cancelled or skipped",
    "lastFinishedAt": "when the newest finished execution finished",
    "executions": "GET /v1/jobs/{jobId} only: how the job's executions ended so far, and how many are pending",
    "payloadRef": "where a large payload is kept (the payload field then holds it whole on GET of the job)",
}
FIELD_DESCRIPTIONS: dict[str, dict[str, str]] = {
    "JobIn": _JOB,
    "JobOut": _JOB,
    "TargetIn": _TARGET,
    "TargetOut": _TARGET,
    "TargetAuth": _TARGET_AUTH,
    "ScheduleIn": _SCHEDULE,
    "ScheduleOut": _SCHEDULE,
    "RetryIn": _RETRY,
    "RetryOut": _RETRY,
    "DstIn": {
        "gap": "a fire time a spring-forward skips: shift (run at the first valid instant after it) or skip",
        "repeat": "a fixed-hour fire time a fall-back repeats: once (the first instance) or twice",
    },
    "ExecutionCounts": {
        "succeeded": "executions that succeeded",
        "dead": "executions dead-lettered",
        "cancelled": "executions cancelled",
        "skipped": "occurrences recorded as skipped",
        "pending": "executions still to run or running",
    },
    "BackfillIn": {
        "from": "first instant of the range (inclusive)",
        "to": "end of the range (exclusive, not in the future)",
        "overlap": "allow (default) or forbid: one backfilled occurrence per timeoutSeconds",
    },
    "BackfillOut": {
        "created": "occurrences created",
        "existing": "occurrences that already had an execution",
        "nextFrom": "set when the range held more than 1,000 occurrences: call again from here",
        "note": "why nothing was created when the range holds no occurrence",
    },
    "RunIn": {
        "overlap": "overrides the job's concurrency policy for this run (a buffer_one job's run starts at once, "
        "as with allow: a manual run never waits)"
    },
    "ResumeIn": {"missed": "occurrences missed while paused: skip (default) or run_once"},
}


def describe_fields(known: dict[str, Any]) -> None:
    """Give each listed property of the component schemas its description (kept where one is set)."""
    for name, described in FIELD_DESCRIPTIONS.items():
        schema = known.get(name)
        # Litestar's own schemas are objects; those msgspec writes (the action bodies) are plain dicts.
        properties = schema.get("properties") if isinstance(schema, dict) else getattr(schema, "properties", None)
        for field, text in described.items():
            prop = (properties or {}).get(field)
            if isinstance(prop, dict):
                prop.setdefault("description", text)
            elif prop is not None and not getattr(prop, "description", None):
                prop.description = text
