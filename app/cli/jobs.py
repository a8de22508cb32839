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

import sys
from typing import Any, Literal

import click

from app.cli._jobs_change import changed, jobs_backfill, jobs_run, jobs_update
from app.cli.client import PAGE_MAX, Execution, Job, KairosClient, every_page
from app.cli.job_body import NO_DATA, build_job, read_file
from app.cli.job_views import more_hint, show_attempts, show_executions, show_job, show_jobs
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
    table,
    when,
)
from app.cli.usage import fail
from app.domain.states import REPORTED_JOB_STATES
from app.errors import InvalidInput


@api_group("jobs")
def jobs() -> None:
    """Submit, list, inspect, pause, resume and cancel jobs (a tenant's API key)."""


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
    "--pause-on-failure",
    is_flag=True,
    default=False,
    help="Cron or every: a dead-lettered occurrence pauses the job (resume it with kairos jobs resume).",
)
@click.option(
    "--max-runs",
    type=click.IntRange(1, 1_000_000_000),
    metavar="N",
    help="Cron or every: the job completes once its schedule has started N occurrences.",
)
@click.option(
    "--delete-after",
    type=DURATION,
    metavar="DURATION",
    help="Remove the job to the archive this long after it completed or was cancelled (0s: at once).",
)
@click.option(
    "--payload",
    type=JSON_VALUE,
    default=NO_DATA,
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
            if v is not None and v is not NO_DATA and v != () and v is not False
        )
        if used:
            fail(f"--file holds the whole job; leave out {', '.join(used)}")
        document = read_file(file)
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


@jobs.command("pause")
@click.argument("job_id", type=JOB_ID)
@json_option
@pass_api
def jobs_pause(api: KairosClient, job_id: str, as_json: bool) -> None:
    """Pause a job: no occurrence runs until it is resumed."""
    changed(api.pause_job(job_id), as_json, "paused")


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
    changed(api.resume_job(job_id, missed), as_json, "resumed")


@jobs.command("cancel")
@click.argument("job_id", type=JOB_ID)
@json_option
@pass_api
def jobs_cancel(api: KairosClient, job_id: str, as_json: bool) -> None:
    """Cancel a job: its next occurrence is removed, executions not yet started are cancelled."""
    api.cancel_job(job_id)
    changed(api.get_job(job_id), as_json, "cancelled")


for _command in (jobs_backfill, jobs_run, jobs_update):
    jobs.add_command(_command)
