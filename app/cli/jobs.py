"""``kairos jobs ...``: a tenant's jobs over the REST API (``app.cli.client``).

Every command takes ``--json`` (one JSON document on stdout) and the group takes ``--api-url`` and
``--api-key`` (default ``$KAIROS_API_URL``, ``$KAIROS_API_KEY``). Adding a command is a few lines,
for instance::

    @jobs.command("run")
    @click.argument("job_id", type=JOB_ID)
    @json_option
    @pass_api
    def jobs_run(api: KairosClient, job_id: str, as_json: bool) -> None:
        \"\"\"Run JOB_ID once now, outside its schedule.\"\"\"
        execution = api.call("POST", f"/v1/jobs/{job_id}:run", expect=Execution)
        emit(execution, as_json, lambda: show_executions([execution]))
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

import click

from app.cli.client import PAGE_MAX, Execution, Job, KairosClient, every_page
from app.cli.job_views import more_hint, show_attempts, show_executions, show_job, show_jobs
from app.cli.pools import check_pool_ref
from app.cli.remote import (
    DURATION,
    EXECUTION_ID,
    INSTANT,
    JOB_ID,
    JSON_VALUE,
    api_group,
    emit,
    json_option,
    pass_api,
    progress,
    read_text,
    table,
    utc_iso,
    when,
)
from app.cli.usage import fail
from app.domain.states import REPORTED_JOB_STATES
from app.errors import InvalidInput

_NO_DATA = object()


@api_group("jobs")
def jobs() -> None:
    """Submit, list, inspect, pause, resume and cancel jobs (a tenant's API key)."""


def _read_file(path: str) -> Any:
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
        for flag, value in (("--jitter", jitter), ("--start-at", start_at), ("--end-at", end_at))
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
        "payload": None if payload is _NO_DATA else payload,
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
    return body


@jobs.command("submit")
@click.option(
    "--file",
    "file",
    metavar="PATH",
    help="The whole job as JSON (POST /v1/jobs body; - for stdin). An array submits each item through /v1/jobs:batch.",
)
@click.option("--name", help="Job name.")
@click.option("--cron", metavar="EXPR", help="Cron expression (5 fields, names, H tokens); needs --tz.")
@click.option(
    "--tz",
    metavar="ZONE",
    help="IANA zone of --cron, e.g. Europe/London; with --every in whole days, the zone whose local time it keeps.",
)
@click.option(
    "--every",
    metavar="DURATION",
    help="Run every DURATION (90s, 15m, 1h30m, 1d), from --start-at or now; 1d --tz ZONE keeps the local time.",
)
@click.option(
    "--start-at", type=INSTANT, help="Cron or every: no occurrence before this instant (the every grid's anchor)."
)
@click.option("--end-at", type=INSTANT, help="Cron or every: no occurrence at or after this instant.")
@click.option("--at", "at", type=INSTANT, help="Run once at this instant (ISO 8601 with an offset).")
@click.option("--in", "delay", type=DURATION, help="Run once after this long: 90s, 5m, 1h30m, 2d.")
@click.option("--pool", metavar="NAME", help="Deliver to this worker pool: NAME (the tenant's own) or shared/NAME.")
@click.option("--url", metavar="URL", help="Deliver with an HTTP request (POST unless --method) to this URL.")
@click.option("--method", type=click.Choice(["POST", "PUT", "PATCH", "GET"]), help="HTTP method of --url.")
@click.option(
    "--header",
    "headers",
    multiple=True,
    metavar="'NAME: VALUE'",
    help="A header sent with each --url delivery (repeatable).",
)
@click.option(
    "--oidc",
    is_flag=True,
    default=False,
    help="Send each delivery of --url with Authorization: Bearer <JWT>, an identity token Kairos signs "
    "(audience: the URL).",
)
@click.option("--oidc-audience", metavar="AUDIENCE", help="Like --oidc, with this audience (the token's aud).")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="A label (repeatable); filter with jobs ls --label KEY:VALUE.",
)
@click.option(
    "--dry-run", is_flag=True, default=False, help="A dry-run job: occurrences are recorded, never delivered."
)
@click.option(
    "--payload",
    type=JSON_VALUE,
    default=_NO_DATA,
    show_default=False,
    help="Payload as JSON (@file reads it from a file).",
)
@click.option("--idempotency-key", metavar="KEY", help="Makes a retried submit return the same job.")
@click.option("--jitter", type=DURATION, help="Cron or every: jitter window.")
@click.option("--max-attempts", type=click.IntRange(1, 100), help="Attempts before dead-lettering.")
@click.option("--backoff", type=DURATION, help="First retry delay (doubles each attempt).")
@click.option("--max-retry-duration", type=DURATION, help="No retry starts this long after the first attempt.")
@click.option("--timeout", type=DURATION, help="Per-attempt timeout.")
@click.option(
    "--concurrency",
    type=click.Choice(["allow", "forbid", "replace", "buffer_one"]),
    help="While the previous run is unfinished: run anyway, skip, replace it, or keep one waiting (buffer_one).",
)
@click.option("--misfire", type=click.Choice(["run_once", "catch_up", "skip"]))
@click.option(
    "--dst-gap", type=click.Choice(["shift", "skip"]), help="Cron or zoned --every: a time a spring-forward skips."
)
@click.option(
    "--dst-repeat", type=click.Choice(["once", "twice"]), help="Cron or zoned --every: a time a fall-back repeats."
)
@json_option
@pass_api
def jobs_submit(
    api: KairosClient, /, file: str | None, idempotency_key: str | None, as_json: bool, **flags: Any
) -> None:
    """Submit a job: the whole body with --file, or the common cases with flags.

    \b
    kairos jobs submit --name report --in 90s --url https://example.com/hook --payload '{"x":1}'
    kairos jobs submit --name digest --cron '0 9 * * MON-FRI' --tz Europe/London --pool emails
    kairos jobs submit --name sync --every 15m --label team=payments --url https://example.com/sync --method PUT
    kairos jobs submit --name nightly --every 1d --tz Europe/London --concurrency buffer_one --pool reports
    kairos jobs submit --file job.json
    """
    if file is not None:
        used = sorted(
            f"--{k.replace('_', '-')}"
            for k, v in flags.items()
            if v is not None and v is not _NO_DATA and v != () and v is not False
        )
        if used:
            fail(f"--file holds the whole job; leave out {', '.join(used)}")
        document = _read_file(file)
        if isinstance(document, list):
            if idempotency_key:
                fail("--idempotency-key is for one job; give each item of the array its own idempotencyKey")
            _submit_many(api, document, as_json)
            return
        if not isinstance(document, dict):
            fail(f"{file}: a job is a JSON object (or an array of them)")
        body = document
    else:
        body = build_job(**flags)
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= 255:
        fail("--idempotency-key: must be 1-255 characters")
    created = api.create_job(body, idempotency_key)
    emit(created, as_json, lambda: click.echo(f"submitted {created['jobId']}, next run {when(created['nextRunAt'])}"))


def _submit_many(api: KairosClient, items: list[Any], as_json: bool) -> None:
    from app.cli.client import BATCH_MAX

    if not all(isinstance(item, dict) for item in items):
        fail("every item of the array must be a JSON object (a job)")
    results: list[Any] = []
    with progress() as bar:
        task = bar.add_task("submitting", total=len(items))
        for start in range(0, len(items), BATCH_MAX):
            chunk = items[start : start + BATCH_MAX]
            for result in api.create_jobs(chunk):
                if "index" in result:
                    result["index"] += start
                results.append(result)
            bar.advance(task, len(chunk))
    refused = [r for r in results if r.get("error")]

    def render() -> None:
        table(
            ["#", "JOB", "NEXT RUN", "ERROR"],
            [(i, r.get("jobId"), when(r.get("nextRunAt")), _item_error(r)) for i, r in enumerate(results)],
        )

    emit({"results": results}, as_json, render)
    if refused:
        sys.stderr.write(f"error: {len(refused)} of {len(results)} jobs refused\n")
        sys.exit(2)


def _item_error(result: Any) -> str | None:
    from app.cli.client import problem_line

    error = result.get("error")
    if not error:
        return None
    return problem_line(str(error.get("title", "refused")), error.get("detail"), error.get("field"))


# -- reading -------------------------------------------------------------------------------------------


@jobs.command("ls")
@click.option("--state", type=click.Choice(REPORTED_JOB_STATES), help="Only jobs in this state.")
@click.option("--name", help="Only jobs with exactly this name.")
@click.option("--name-prefix", help="Only jobs whose name starts with this.")
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="SELECTOR",
    help="Only jobs matching this label selector: KEY:VALUE, KEY!=VALUE, 'KEY in (A,B)', "
    "'KEY notin (A,B)', KEY or !KEY (repeatable: all must hold).",
)
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=None, help="Jobs per page (default 50).")
@click.option("--all", "all_pages", is_flag=True, help="Follow the cursors to the last page.")
@click.option("--cursor", help="Start at this page (from an earlier --json nextCursor).")
@json_option
@pass_api
def jobs_ls(
    api: KairosClient,
    state: str | None,
    name: str | None,
    name_prefix: str | None,
    labels: tuple[str, ...],
    limit: int | None,
    all_pages: bool,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List jobs, newest first."""
    if labels:
        from app.domain.jobs import parse_label_selectors  # only when given: it loads the schedule code

        try:
            parse_label_selectors(labels)
        except InvalidInput as exc:
            raise click.BadParameter(exc.detail, param_hint="--label") from None
    found: list[Job] = []
    nxt = None
    size = limit or (PAGE_MAX if all_pages else None)
    for page in every_page(
        lambda c: api.list_jobs(state=state, name=name, limit=size, cursor=c, name_prefix=name_prefix, labels=labels),
        cursor=cursor,
        all_pages=all_pages,
    ):
        found += page.items
        nxt = page.next_cursor

    def render() -> None:
        show_jobs(found)
        more_hint(nxt, len(found))

    emit({"jobs": found, "nextCursor": nxt}, as_json, render)


@jobs.command("show")
@click.argument("job_id", type=JOB_ID)
@json_option
@pass_api
def jobs_show(api: KairosClient, job_id: str, as_json: bool) -> None:
    """One job."""
    job = api.get_job(job_id)
    emit(job, as_json, lambda: show_job(job))


@jobs.command("history")
@click.argument("job_id", type=JOB_ID)
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=None, help="Executions per page (default 50).")
@click.option("--all", "all_pages", is_flag=True, help="Follow the cursors to the first execution.")
@click.option("--cursor", help="Start at this page (from an earlier --json nextCursor).")
@json_option
@pass_api
def jobs_history(
    api: KairosClient, job_id: str, limit: int | None, all_pages: bool, cursor: str | None, as_json: bool
) -> None:
    """A job's executions, newest first."""
    found: list[Execution] = []
    nxt = None
    size = limit or (PAGE_MAX if all_pages else None)
    for page in every_page(
        lambda c: api.job_executions(job_id, limit=size, cursor=c), cursor=cursor, all_pages=all_pages
    ):
        found += page.items
        nxt = page.next_cursor

    def render() -> None:
        show_executions(found)
        more_hint(nxt, len(found))

    emit({"executions": found, "nextCursor": nxt}, as_json, render)


@jobs.command("attempts")
@click.argument("execution_id", type=EXECUTION_ID)
@json_option
@pass_api
def jobs_attempts(api: KairosClient, execution_id: str, as_json: bool) -> None:
    """Every attempt of one execution (from `kairos jobs history`), oldest first."""
    rows = api.attempts(execution_id)
    emit({"attempts": rows}, as_json, lambda: show_attempts(rows))


# -- state changes -------------------------------------------------------------------------------------


def _changed(job: Job, as_json: bool, verb: str) -> None:
    emit(
        job,
        as_json,
        lambda: click.echo(f"{verb} {job['jobId']} ({job['name']}): {job['state']}, next run {when(job['nextRunAt'])}"),
    )


@jobs.command("pause")
@click.argument("job_id", type=JOB_ID)
@json_option
@pass_api
def jobs_pause(api: KairosClient, job_id: str, as_json: bool) -> None:
    """Pause a job: no occurrence runs until it is resumed."""
    _changed(api.pause_job(job_id), as_json, "paused")


@jobs.command("resume")
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--missed",
    type=click.Choice(["skip", "run_once"]),
    default="skip",
    show_default=True,
    help="What happens to the occurrences missed while paused.",
)
@json_option
@pass_api
def jobs_resume(api: KairosClient, job_id: str, missed: Literal["skip", "run_once"], as_json: bool) -> None:
    """Resume a paused job."""
    _changed(api.resume_job(job_id, missed), as_json, "resumed")


@jobs.command("cancel")
@click.argument("job_id", type=JOB_ID)
@json_option
@pass_api
def jobs_cancel(api: KairosClient, job_id: str, as_json: bool) -> None:
    """Cancel a job: its next occurrence is removed, executions not yet started are cancelled."""
    api.cancel_job(job_id)
    _changed(api.get_job(job_id), as_json, "cancelled")


# -- update, run now, backfill ---------------------------------------------------------------------------


def _label_patch(pairs: Sequence[str]) -> dict[str, str | None]:
    """KEY=VALUE sets a label, KEY= removes it (JSON Merge Patch null)."""
    out: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE (KEY= removes the label)", param_hint="--label")
        out[key] = value or None
    return out


@jobs.command("update")
@click.argument("job_id", type=JOB_ID)
@click.option("--patch", "patch_doc", type=JSON_VALUE, help="A JSON Merge Patch of the submit body.")
@click.option("--file", type=click.Path(dir_okay=False, allow_dash=True), help="The patch from a file (- for stdin).")
@click.option("--name", help="A new name.")
@click.option("--cron", help="A new cron expression (the job keeps its zone unless --tz).")
@click.option("--tz", help="A new IANA zone for the cron expression, or for an every of whole days.")
@click.option("--every", help="A new interval, e.g. 15m.")
@click.option("--payload", type=JSON_VALUE, help="A new payload (JSON).")
@click.option("--label", "labels", multiple=True, metavar="KEY=VALUE", help="Set a label; KEY= removes it.")
@click.option("--dry-run/--live", "dry_run", default=None, help="Record occurrences only, or deliver them again.")
@click.option("--if-version", type=click.IntRange(1), help="Refuse the update unless the job is at this version.")
@json_option
@pass_api
def jobs_update(
    api: KairosClient,
    job_id: str,
    patch_doc: Any,
    file: str | None,
    name: str | None,
    cron: str | None,
    tz: str | None,
    every: str | None,
    payload: Any,
    labels: tuple[str, ...],
    dry_run: bool | None,
    if_version: int | None,
    as_json: bool,
) -> None:
    """Change a job; its next occurrence follows the new schedule."""
    patch: dict[str, Any] = {}
    if patch_doc is not None or file is not None:
        if patch_doc is not None and file is not None:
            raise click.UsageError("give --patch or --file, not both")
        patch = _read_file(file) if file is not None else patch_doc
        if not isinstance(patch, dict):
            raise click.UsageError("the patch must be a JSON object")
    schedule: dict[str, Any] = {k: v for k, v in (("cron", cron), ("tz", tz), ("every", every)) if v is not None}
    if cron is not None and every is not None:
        raise click.UsageError("give --cron or --every, not both")
    if schedule:
        patch["schedule"] = {**patch.get("schedule", {}), **schedule}
    for key, value in (("name", name), ("payload", payload), ("dryRun", dry_run)):
        if value is not None:
            patch[key] = value
    if labels:
        patch["labels"] = {**patch.get("labels", {}), **_label_patch(labels)}
    if not patch:
        raise click.UsageError("nothing to change: give --patch, --file or a field option")
    _changed(api.update_job(job_id, patch, if_version), as_json, "updated")


@jobs.command("run")
@click.argument("job_id", type=JOB_ID)
@click.option(
    "--overlap",
    type=click.Choice(["allow", "forbid", "replace"]),
    help="Override the job's concurrency policy for this run.",
)
@json_option
@pass_api
def jobs_run(api: KairosClient, job_id: str, overlap: str | None, as_json: bool) -> None:
    """Run JOB_ID once now, outside its schedule."""
    out = api.run_job(job_id, overlap)
    emit(out, as_json, lambda: click.echo(f"running {job_id} now: execution {out['executionId']}"))


@jobs.command("backfill")
@click.argument("job_id", type=JOB_ID)
@click.option("--from", "start", type=INSTANT, required=True, help="First instant of the range (inclusive).")
@click.option("--to", "end", type=INSTANT, required=True, help="End of the range (exclusive, not in the future).")
@click.option("--overlap", type=click.Choice(["allow", "forbid"]), help="allow (default) or forbid overlaps.")
@json_option
@pass_api
def jobs_backfill(
    api: KairosClient, job_id: str, start: datetime, end: datetime, overlap: str | None, as_json: bool
) -> None:
    """Create the occurrences of a past range, paced like catch-up; 1,000 per call, as many calls as needed."""
    if start >= end:
        raise click.BadParameter("must be after --from", param_hint="--to")
    created = existing = 0
    note: str | None = None
    cursor: str | None = utc_iso(start)
    total_s = (end - start).total_seconds()
    with progress() as bar:
        task = bar.add_task("backfill", total=total_s)
        while cursor is not None:
            out = api.backfill_job(job_id, cursor, utc_iso(end), overlap)
            created += out["created"]
            existing += out["existing"]
            cursor = out["nextFrom"]
            note = out.get("note", note)
            done = total_s if cursor is None else (datetime.fromisoformat(cursor) - start).total_seconds()
            bar.update(task, completed=done)
    summary: dict[str, Any] = {"created": created, "existing": existing}
    if note:
        summary["note"] = note
    emit(
        summary,
        as_json,
        lambda: click.echo(
            f"backfilled {job_id}: {created} created, {existing} already there" + (f" ({note})" if note else "")
        ),
    )
