"""``kairos crontab import|compare``: move a classic crontab to Kairos, and see where the two differ.

The file is read by :func:`app.domain.crontab.parse_crontab` (a refused line names its number and
nothing is sent), fire times come from Kairos's own schedule code (``app.domain.schedule``), and
the jobs go through ``POST /v1/jobs:batch`` with idempotency keys derived from each line, so an
import run twice creates nothing new. ``compare`` needs no API: it sets classic cron's behaviour
(:func:`app.domain.crontab.classic_runs`, a port of cronie's clock) beside Kairos's occurrences.
"""

from __future__ import annotations

import sys
from datetime import date, datetime, timezone
from typing import Any
from zoneinfo import ZoneInfo

import click

from app.cli.client import BATCH_MAX, problem_line
from app.cli.pools import check_pool_ref
from app.cli.remote import api_group, connected, emit, json_option, progress, read_text, stderr, stdout, table, utc_iso
from app.cli.usage import fail
from app.domain import crontab as classic
from app.domain.schedule import CronSchedule, DstPolicy, preview, validate_tz
from app.errors import InvalidInput

FIRE_TIMES = 3


@api_group("crontab")
def crontab() -> None:
    """Import a classic crontab as Kairos jobs, or compare the two schedulers' fire times."""


def _entries(path: str, skipped: list[classic.SkippedLine] | None = None) -> list[classic.CrontabEntry]:
    """The job lines of ``path``; with ``skipped``, lines Kairos cannot schedule are collected there."""
    text = read_text(path)
    try:
        entries = classic.parse_crontab(text, skipped=skipped)
    except InvalidInput as exc:
        fail(f"{path}: {exc.field}: {exc.detail}")
    if not entries:
        fail(f"{path} has no job lines" + (" Kairos can schedule" if skipped else ""))
    return entries


SKIP_UNSUPPORTED = click.option(
    "--skip-unsupported",
    is_flag=True,
    help="Leave out the lines Kairos cannot schedule (@reboot) and list them, instead of refusing the file.",
)


def _zone_of(entry: classic.CrontabEntry, default: str | None, path: str) -> str:
    try:
        return entry.zone(default)
    except InvalidInput as exc:
        fail(f"{path}: {exc.field}: {exc.detail}")


def _local(moment: datetime, zone: str) -> str:
    return moment.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M %Z")


def _check_tz(tz: str | None, flag: str) -> None:
    if tz is None:
        return
    try:
        validate_tz(tz)
    except InvalidInput as exc:
        fail(f"{flag}: {exc.detail}")


@crontab.command("import")
@click.argument("file", metavar="FILE")
@click.option("--pool", metavar="NAME", help="Deliver every job to this worker pool.")
@click.option("--url", metavar="URL", help="Deliver every job with an HTTP POST to this URL.")
@click.option("--tz", metavar="ZONE", help="Zone of the lines without CRON_TZ/TZ (the zone cron ran in).")
@click.option("--dry-run", is_flag=True, help="Show the jobs and their next fire times; create nothing.")
@click.option(
    "--as-dry-run-jobs",
    is_flag=True,
    help='Create each job with "dryRun": true (occurrences recorded, never delivered).',
)
@click.option("--name-prefix", default="crontab: ", show_default=True, help="Job names are this plus the command.")
@click.option(
    "--revision",
    type=click.IntRange(1),
    default=1,
    show_default=True,
    help="A new set of idempotency keys for every line: to import again after cancelling the jobs "
    "of an import whose lines' settings changed.",
)
@SKIP_UNSUPPORTED
@json_option
def crontab_import(
    file: str,
    pool: str | None,
    url: str | None,
    tz: str | None,
    dry_run: bool,
    as_dry_run_jobs: bool,
    name_prefix: str,
    revision: int,
    skip_unsupported: bool,
    as_json: bool,
) -> None:
    """Create a Kairos cron job per line of crontab FILE (- for stdin).

    Each job's payload is {"command": ..., "env": {...}} (plus "stdin", "shell" and "mailto" when
    the file sets them). A line's idempotency key is derived from its text: importing the file
    again returns the jobs already created.
    """
    if (pool is None) == (url is None):
        fail("give one of --pool NAME or --url URL" + (", not both" if pool and url else ""))
    if url is not None:
        from app.domain.jobs import validate_target

        try:
            validate_target("http", url)
        except InvalidInput as exc:
            fail(f"--url: {exc.detail}")
    else:
        assert pool is not None
        check_pool_ref(pool)
    _check_tz(tz, "--tz")
    skipped: list[classic.SkippedLine] | None = [] if skip_unsupported else None
    entries = _entries(file, skipped)
    now = datetime.now(timezone.utc)
    planned: list[dict[str, Any]] = []
    for entry in entries:
        zone = _zone_of(entry, tz, file)
        body = classic.job_body(
            entry,
            tz=zone,
            target_type="http" if url else "queue",
            target_ref=url or pool or "",
            name_prefix=name_prefix,
            dry_run=as_dry_run_jobs,
            revision=revision,
        )
        fire = preview(CronSchedule(expr=entry.fields, tz=zone), now, FIRE_TIMES, classic.JOB_KEY)
        warning = None
        if classic.ClassicEntry.of(entry.fields).day_rule_differs:
            warning = (
                f"line {entry.line}: classic cron runs '{entry.schedule}' only on days matching both day "
                "fields (one starts with *); Kairos runs it on days matching either"
            )
        planned.append(
            {
                "line": entry.line,
                "schedule": entry.schedule,
                "tz": zone,
                "command": entry.command,
                "nextFireTimes": [
                    {"at": utc_iso(o.run_at), "local": _local(o.run_at, zone), "dstNote": o.dst_note} for o in fire
                ],
                "warning": warning,
                "job": body,
            }
        )
    for item in planned:
        if item["warning"] and not as_json:
            stderr.print(f"warning: {item['warning']}", markup=False, highlight=False)
    for line in skipped or ():
        if not as_json:
            stderr.print(
                f"skipped line {line.line}: {line.text} ({line.reason})", markup=False, highlight=False, soft_wrap=True
            )

    if not dry_run:
        results: list[Any] = []
        with connected() as api, progress() as bar:
            task = bar.add_task("importing", total=len(planned))
            for start in range(0, len(planned), BATCH_MAX):
                chunk = planned[start : start + BATCH_MAX]
                results += api.create_jobs([item["job"] for item in chunk])
                bar.advance(task, len(chunk))
        for item, result in zip(planned, results, strict=True):
            item["jobId"] = result.get("jobId")
            error = result.get("error")
            item["error"] = (
                problem_line(str(error.get("title", "refused")), error.get("detail"), error.get("field"))
                if error
                else None
            )
            if error and str(error.get("type", "")).endswith("/idempotency-conflict"):
                item["error"] += (
                    f" (the line was imported before with other settings: cancel that "
                    f"import's jobs and import again with --revision {revision + 1})"
                )
    refused = [item for item in planned if item.get("error")]

    def render() -> None:
        rows = []
        for item in planned:
            times = "\n".join(
                t["local"] + (f" ({t['dstNote']})" if t["dstNote"] else "") for t in item["nextFireTimes"]
            )
            outcome = item.get("error") or item.get("jobId") or "(dry run)"
            rows.append((item["line"], item["schedule"], item["tz"], item["command"], times, outcome))
        table(["LINE", "SCHEDULE", "ZONE", "COMMAND", f"NEXT {FIRE_TIMES} FIRE TIMES", "JOB"], rows)
        if dry_run:
            stdout.print(f"{len(planned)} job(s) would be created; nothing was sent (--dry-run)", markup=False)
        else:
            stdout.print(
                f"{len(planned) - len(refused)} of {len(planned)} line(s) imported"
                + (" as dry-run jobs" if as_dry_run_jobs else "")
                + (f"; {len(skipped)} skipped" if skipped else "")
                + "; a line imported before keeps its job",
                markup=False,
            )

    document: dict[str, Any] = {"submitted": not dry_run, "jobs": planned}
    if skipped is not None:
        document["skipped"] = [{"line": s.line, "text": s.text, "reason": s.reason} for s in skipped]
    emit(document, as_json, render)
    if refused:
        for item in refused:
            sys.stderr.write(f"error: {file}: line {item['line']}: {item['error']}\n")
        sys.exit(2)


def _moment(text: str, zone: ZoneInfo, flag: str) -> datetime:
    """A date (midnight) or a date-time; without an offset it is read in ``zone``."""
    try:
        parsed = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError:
        try:
            day = date.fromisoformat(text)
        except ValueError:
            fail(f"{flag}: {text!r} is not a date or ISO 8601 time such as 2027-03-14 or 2027-03-14T09:00:00Z")
        parsed = datetime(day.year, day.month, day.day)
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=zone)
    return parsed.astimezone(timezone.utc)


@crontab.command("compare")
@click.argument("file", metavar="FILE")
@click.option("--from", "start", required=True, metavar="TIME", help="Start: a date or an ISO 8601 time.")
@click.option("--to", "end", required=True, metavar="TIME", help="End (excluded), at most 366 days after --from.")
@click.option("--tz", metavar="ZONE", help="Zone of the lines without CRON_TZ/TZ, and of --from/--to.")
@click.option(
    "--daemon-tz",
    metavar="ZONE",
    help="cronie's own zone, when CRON_TZ lines name another (default: each line's zone).",
)
@click.option(
    "--dst-gap",
    type=click.Choice(["shift", "skip"]),
    default="shift",
    show_default=True,
    help="The Kairos policy compared for a spring-forward gap.",
)
@click.option(
    "--dst-repeat",
    type=click.Choice(["once", "twice"]),
    default="once",
    show_default=True,
    help="The Kairos policy compared for a fall-back repeat.",
)
@SKIP_UNSUPPORTED
@json_option
def crontab_compare(
    file: str,
    start: str,
    end: str,
    tz: str | None,
    daemon_tz: str | None,
    dst_gap: str,
    dst_repeat: str,
    skip_unsupported: bool,
    as_json: bool,
) -> None:
    """Where Kairos's fire times differ from classic cron's (cronie, Vixie cron) for each line of FILE.

    Classic cron catches up fixed-time jobs a spring-forward skipped and runs them once in a
    fall-back; jobs with * in the minute or hour field follow the new local time and run in both
    passes of a repeated hour. Kairos shifts (or skips, --dst-gap skip) times in a gap, and runs a
    fixed hour once in a repeat (--dst-repeat twice: both).
    """
    _check_tz(tz, "--tz")
    _check_tz(daemon_tz, "--daemon-tz")
    range_zone = ZoneInfo(tz or "UTC")
    lo, hi = _moment(start, range_zone, "--from"), _moment(end, range_zone, "--to")
    if hi <= lo:
        fail("--to must be after --from")
    if hi - lo > classic.MAX_RANGE:
        fail(f"--to: the range is at most {classic.MAX_RANGE.days} days")
    skipped: list[classic.SkippedLine] | None = [] if skip_unsupported else None
    entries = _entries(file, skipped)
    for line in skipped or ():
        if not as_json:
            stderr.print(
                f"skipped line {line.line}: {line.text} ({line.reason})", markup=False, highlight=False, soft_wrap=True
            )
    dst = DstPolicy(gap="skip" if dst_gap == "skip" else "shift", repeat="twice" if dst_repeat == "twice" else "once")
    lines: list[dict[str, Any]] = []
    for entry in entries:
        zone = _zone_of(entry, tz, file)
        cronie_tz = ZoneInfo(daemon_tz) if daemon_tz and entry.tz_variable == "CRON_TZ" else None
        result = classic.compare(entry.fields, zone, lo, hi, dst=dst, daemon_zone=cronie_tz)
        lines.append(
            {
                "line": entry.line,
                "schedule": entry.schedule,
                "tz": zone,
                "command": entry.command,
                "identical": result.identical,
                "classicRuns": len(result.classic),
                "kairosRuns": len(result.kairos),
                "notes": [
                    {
                        "text": n.text,
                        "differs": n.differs,
                        "classic": [utc_iso(i) for i in n.classic],
                        "kairos": [utc_iso(i) for i in n.kairos],
                    }
                    for n in result.notes
                ],
            }
        )

    def render() -> None:
        stdout.print(
            f"classic cron against Kairos from {utc_iso(lo)} to {utc_iso(hi)} "
            f"(Kairos dst gap {dst_gap}, repeat {dst_repeat})",
            markup=False,
        )
        for item in lines:
            stdout.print(
                f"\nline {item['line']}  {item['schedule']}  {item['tz']}  {item['command']}",
                markup=False,
                style="bold",
            )
            counts = f"classic cron {item['classicRuns']} runs, Kairos {item['kairosRuns']}"
            stdout.print(("  no differences" if item["identical"] else "  differs") + f" ({counts})", markup=False)
            for note in item["notes"]:
                stdout.print(f"  {'differs' if note['differs'] else 'same   '}  {note['text']}", markup=False)

    emit(
        {"from": utc_iso(lo), "to": utc_iso(hi), "identical": all(i["identical"] for i in lines), "lines": lines},
        as_json,
        render,
    )
