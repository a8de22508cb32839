"""``kairos jobs update``, ``run`` and ``backfill`` (registered on the group by app.cli.jobs), and the line a
changed job is shown by."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import click

from app.cli.client import Job, KairosClient
from app.cli.job_body import check_delete_after, read_file
from app.cli.remote import DURATION, INSTANT, JOB_ID, JSON_VALUE, emit, json_option, pass_api, progress, utc_iso, when


def changed(job: Job, as_json: bool, verb: str) -> None:
    """What a command that changed ``job`` prints: the job (--json) or one line saying ``verb``."""
    emit(
        job,
        as_json,
        lambda: click.echo(f"{verb} {job['jobId']} ({job['name']}): {job['state']}, next run {when(job['nextRunAt'])}"),
    )


# -- update, run now, backfill ---------------------------------------------------------------------------


def _label_patch(pairs: Sequence[str]) -> dict[str, str | None]:
    """KEY=VALUE sets a label, KEY= removes it (JSON Merge Patch null)."""
    out: dict[str, str | None] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE (KEY= removes the label)", param_hint="--label")
        if key in out:
            raise click.BadParameter(f"{key!r} is given twice; a job has one value per label key", param_hint="--label")
        out[key] = value or None
    return out


@click.command("update")
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
@click.option(
    "--pause-on-failure/--no-pause-on-failure", default=None, help="Pause the job when an occurrence is dead-lettered."
)
@click.option("--max-runs", type=click.IntRange(1, 1_000_000_000), metavar="N", help="A new run limit.")
@click.option("--delete-after", type=DURATION, metavar="DURATION", help="A new removal delay after the job finishes.")
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
    pause_on_failure: bool | None,
    max_runs: int | None,
    delete_after: float | None,
    if_version: int | None,
    as_json: bool,
) -> None:
    """Change a job; its next occurrence follows the new schedule (--patch '{"maxRuns": null}' removes a limit)."""
    patch: dict[str, Any] = {}
    if patch_doc is not None or file is not None:
        if patch_doc is not None and file is not None:
            raise click.UsageError("give --patch or --file, not both")
        patch = read_file(file) if file is not None else patch_doc
        if not isinstance(patch, dict):
            raise click.UsageError("the patch must be a JSON object")
    schedule: dict[str, Any] = {k: v for k, v in (("cron", cron), ("tz", tz), ("every", every)) if v is not None}
    if cron is not None and every is not None:
        raise click.UsageError("give --cron or --every, not both")
    if schedule:
        patch["schedule"] = {**patch.get("schedule", {}), **schedule}
    if delete_after is not None:
        check_delete_after(delete_after)
    for key, value in (
        ("name", name),
        ("payload", payload),
        ("dryRun", dry_run),
        ("pauseOnFailure", pause_on_failure),
        ("maxRuns", max_runs),
        ("deleteAfterCompletionSeconds", None if delete_after is None else int(delete_after)),
    ):
        if value is not None:
            patch[key] = value
    if labels:
        patch["labels"] = {**patch.get("labels", {}), **_label_patch(labels)}
    if not patch:
        raise click.UsageError("nothing to change: give --patch, --file or a field option")
    changed(api.update_job(job_id, patch, if_version), as_json, "updated")


@click.command("run")
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


@click.command("backfill")
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
