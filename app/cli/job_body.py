"""The POST /v1/jobs body ``kairos jobs submit`` builds from its flags, checked before it is sent."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.cli.pools import check_pool_ref
from app.cli.remote import read_text, utc_iso
from app.cli.usage import fail
from app.errors import InvalidInput

# The API's bound on deleteAfterCompletionSeconds (app.domain.jobs.MAX_DELETE_AFTER_S; a test keeps them equal),
# kept here so the CLI does not import the domain package.
DELETE_AFTER_MAX_S = 366 * 86400

# The default of --payload: no payload given (distinct from an explicit JSON null).
NO_DATA = object()


def read_file(path: str) -> Any:
    """The JSON document in the file at ``path`` (- for stdin); exits with one line when it is not JSON."""
    text = read_text(path)
    try:
        return json.loads(text)
    except ValueError as exc:
        fail(f"{'stdin' if path == '-' else path} is not JSON: {exc}")


def _check_cron(expr: str, tz: str) -> None:
    from app.domain.schedule import validate_cron, validate_tz

    try:
        validate_tz(tz)
        validate_cron(expr, "cli")
    except InvalidInput as exc:
        fail(f"{'--tz' if exc.field.endswith('tz') else '--cron'}: {exc.detail}")


def _check_every(every: str, tz: str | None) -> None:
    from app.domain.jobs import parse_every
    from app.domain.schedule.interval import DAY_S

    try:
        every_s = parse_every(every, 1)  # the server's minimum is its own setting: it refuses a shorter one itself
    except InvalidInput as exc:
        fail(f"--every: {exc.detail}")
    if tz is not None and every_s % DAY_S:
        fail(
            f"--tz keeps wall-clock time for whole days (--every 1d, 7d); every {every} is elapsed time: leave --tz out"
        )


def _labels(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            fail(f"--label: {pair!r} is not KEY=VALUE")
        if key in out:
            fail(f"--label: {key!r} is given twice; a job has one value per label key")
        out[key] = value
    return out


def _headers(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition(":")
        if not sep or not name.strip():
            fail(f"--header: {pair!r} is not NAME: VALUE")
        out[name.strip()] = value.strip()
    return out


def build_job(
    *,
    name: str | None,
    cron: str | None,
    tz: str | None,
    at: datetime | None,
    delay: float | None,
    pool: str | None,
    url: str | None,
    payload: Any,
    jitter: float | None,
    max_attempts: int | None,
    backoff: float | None,
    timeout: float | None,
    concurrency: str | None,
    misfire: str | None,
    dst_gap: str | None,
    dst_repeat: str | None,
    every: str | None = None,
    labels: Sequence[str] = (),
    start_at: datetime | None = None,
    end_at: datetime | None = None,
    dry_run: bool = False,
    method: str | None = None,
    headers: Sequence[str] = (),
    max_retry_duration: float | None = None,
    oidc: bool = False,
    oidc_audience: str | None = None,
    pause_on_failure: bool = False,
    max_runs: int | None = None,
    delete_after: float | None = None,
) -> dict[str, Any]:
    """The POST /v1/jobs body the flags describe; one line and exit 2 for flags that do not fit."""
    if not name or not name.strip():
        fail("--name is required (or give the whole job with --file)")
    given = [
        flag
        for flag, value in (("--cron", cron), ("--every", every), ("--at", at), ("--in", delay))
        if value is not None
    ]
    if len(given) != 1:
        fail(
            "give one of --cron EXPR --tz ZONE, --every DURATION, --at TIME or --in DURATION"
            + (f", not {' and '.join(given)}" if given else "")
        )
    if (pool is None) == (url is None):
        fail("give one of --pool NAME or --url URL" + (", not both" if pool and url else ""))
    cron_only = [
        flag
        for flag, value in (("--tz", tz), ("--dst-gap", dst_gap), ("--dst-repeat", dst_repeat))
        if value is not None
    ]
    recurring_only = [
        flag
        for flag, value in (
            ("--jitter", jitter),
            ("--start-at", start_at),
            ("--end-at", end_at),
            ("--pause-on-failure", pause_on_failure or None),
            ("--max-runs", max_runs),
        )
        if value is not None
    ]
    schedule: dict[str, Any]
    if cron is not None:
        if tz is None:
            fail("--cron needs --tz ZONE (an IANA zone such as Europe/London or UTC)")
        _check_cron(cron, tz)
        schedule = {"cron": cron, "tz": tz}
        if dst_gap or dst_repeat:
            schedule["dst"] = {k: v for k, v in (("gap", dst_gap), ("repeat", dst_repeat)) if v}
    elif every is not None:
        _check_every(every, tz)
        if tz is None and (dst_gap or dst_repeat):
            fail("--dst-gap and --dst-repeat apply to --every with --tz ZONE (whole days) or to --cron")
        schedule = {"every": every}
        if tz is not None:
            schedule["tz"] = tz
        if dst_gap or dst_repeat:
            schedule["dst"] = {k: v for k, v in (("gap", dst_gap), ("repeat", dst_repeat)) if v}
    else:
        if cron_only or recurring_only:
            fail(f"{', '.join(cron_only + recurring_only)} only apply to --cron or --every schedules")
        schedule = {"runAt": utc_iso(at)} if at is not None else {"delaySeconds": delay}
    if jitter is not None:
        schedule["jitterSeconds"] = int(jitter)
    if start_at is not None:
        schedule["startAt"] = utc_iso(start_at)
    if end_at is not None:
        schedule["endAt"] = utc_iso(end_at)
    if start_at is not None and end_at is not None and end_at <= start_at:
        fail("--end-at must be after --start-at")
    if url is not None:
        from app.domain.jobs import validate_target

        try:
            validate_target("http", url)
        except InvalidInput as exc:
            fail(f"--url: {exc.detail}")
        target: dict[str, Any] = {"type": "http", "ref": url}
        if method is not None:
            target["method"] = method
        if headers:
            target["headers"] = _headers(headers)
        if oidc or oidc_audience is not None:
            target["auth"] = {"type": "oidc"} | ({"audience": oidc_audience} if oidc_audience is not None else {})
    else:
        assert pool is not None
        http_only = [
            flag
            for flag, value in (
                ("--method", method),
                ("--header", headers),
                ("--oidc", oidc),
                ("--oidc-audience", oidc_audience),
            )
            if value
        ]
        if http_only:
            fail(f"{', '.join(http_only)} only apply to --url targets")
        target = {"type": "queue", "ref": check_pool_ref(pool)}
    body: dict[str, Any] = {
        "name": name,
        "target": target,
        "schedule": schedule,
        "payload": None if payload is NO_DATA else payload,
    }
    if labels:
        body["labels"] = _labels(labels)
    if dry_run:
        body["dryRun"] = True
    retry = {
        k: v
        for k, v in (
            ("maxAttempts", max_attempts),
            ("backoffSeconds", backoff),
            ("maxRetryDurationSeconds", max_retry_duration),
        )
        if v is not None
    }
    if retry:
        body["retry"] = retry
    if timeout is not None:
        body["timeoutSeconds"] = int(timeout)
    if concurrency:
        body["concurrency"] = concurrency
    if misfire:
        body["misfire"] = misfire
    if pause_on_failure:
        body["pauseOnFailure"] = True
    if max_runs is not None:
        body["maxRuns"] = max_runs
    if delete_after is not None:
        check_delete_after(delete_after)
        body["deleteAfterCompletionSeconds"] = int(delete_after)
    return body


def check_delete_after(seconds: float) -> None:
    """The API's bound on deleteAfterCompletionSeconds, said in the flag's own terms (exit 2 before any request)."""
    if seconds > DELETE_AFTER_MAX_S:
        fail(f"--delete-after: at most {DELETE_AFTER_MAX_S // 86400}d")
