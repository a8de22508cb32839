"""``kairos dead-letters ls|replay``: a tenant's dead executions over the REST API.

Bulk replay loops over ``POST /v1/dead-letters:replay``, whose calls are bounded (at most 1,000
executions each) and budgeted per tenant (1,000 a minute, shared by every API replica). The loop
replays at most what matched when it started and never what died after it started (the window's
end is fixed then), so executions that fail again are not replayed round and round.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import click

from app.cli.client import (
    BULK_REPLAY_MAX,
    PAGE_MAX,
    DeadLetter,
    KairosClient,
    Problem,
    Replayed,
    every_page,
    problem_line,
)
from app.cli.remote import (
    DURATION,
    EXECUTION_ID,
    INSTANT,
    JOB_ID,
    JSON_VALUE,
    ago,
    api_group,
    emit,
    json_option,
    pass_api,
    progress,
    stderr,
    table,
    utc_iso,
    when,
)
from app.cli.usage import fail

_NO_DATA = object()
_RESETS_AT = re.compile(r"resets at (\S+)")


@api_group("dead-letters")
def dead_letters() -> None:
    """Dead executions (attempts spent, or a non-retryable error): list and replay them."""


def _instant(value: str) -> datetime:
    return datetime.fromisoformat(value)


def show_dead(rows: list[DeadLetter]) -> None:
    table(
        ["EXECUTION", "JOB", "SCHEDULED FOR", "ATTEMPTS", "FINISHED", "ERROR"],
        [
            (
                d["executionId"],
                d["jobId"],
                when(d["scheduledFor"]),
                f"{d['attempt']}/{d['maxAttempts']}",
                when(d["finishedAt"]),
                d["error"],
            )
            for d in rows
        ],
    )


def matching(
    api: KairosClient,
    *,
    job_id: str | None,
    after: datetime | None,
    before: datetime | None,
    all_pages: bool = True,
    limit: int | None = None,
    cursor: str | None = None,
) -> Iterator[tuple[list[DeadLetter], str | None]]:
    """Pages of dead letters (newest first) finished in [after, before); stops once past ``after``."""
    for page in every_page(
        lambda c: api.dead_letters(job_id=job_id, limit=limit, cursor=c), cursor=cursor, all_pages=all_pages
    ):
        rows = [
            d
            for d in page.items
            if (before is None or _instant(d["finishedAt"]) < before)
            and (after is None or _instant(d["finishedAt"]) >= after)
        ]
        older = after is not None and any(_instant(d["finishedAt"]) < after for d in page.items)
        yield rows, None if older else page.next_cursor
        if older:
            return


@dead_letters.command("ls")
@click.option("--job", "job_id", type=JOB_ID, help="Only this job's dead letters.")
@click.option("--since", type=DURATION, help="Only those that died within this long: 2h, 30m, 1d.")
@click.option("--limit", type=click.IntRange(1, PAGE_MAX), default=None, help="Dead letters per page (default 50).")
@click.option("--all", "all_pages", is_flag=True, help="Follow the cursors to the last page.")
@click.option("--cursor", help="Start at this page (from an earlier --json nextCursor).")
@json_option
@pass_api
def dead_letters_ls(
    api: KairosClient,
    job_id: str | None,
    since: float | None,
    limit: int | None,
    all_pages: bool,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List dead letters, newest first, with their last error."""
    found: list[DeadLetter] = []
    nxt = None
    size = limit or (PAGE_MAX if all_pages else None)
    for rows, following in matching(
        api,
        job_id=job_id,
        after=None if since is None else ago(since),
        before=None,
        all_pages=all_pages,
        limit=size,
        cursor=cursor,
    ):
        found += rows
        nxt = following

    def render() -> None:
        show_dead(found)
        if nxt:
            stderr.print(f"[dim]{len(found)} shown; more with --all or --cursor {nxt}[/]", soft_wrap=True)

    emit({"deadLetters": found, "nextCursor": nxt}, as_json, render)


@dead_letters.command("replay")
@click.argument("execution_ids", nargs=-1, type=EXECUTION_ID)
@click.option("--job", "job_id", type=JOB_ID, help="Replay this job's dead letters.")
@click.option("--since", type=DURATION, help="Replay those that died within this long: 2h, 30m, 1d.")
@click.option("--finished-after", type=INSTANT, help="Replay those that died at or after this instant.")
@click.option("--finished-before", type=INSTANT, help="Replay those that died before this instant.")
@click.option("--all", "everything", is_flag=True, help="Replay every dead letter of the tenant.")
@click.option("--max", "most", type=click.IntRange(1), help="Replay at most this many.")
@click.option("--wait", is_flag=True, help="When the tenant's replay budget is spent, wait for it and go on.")
@click.option(
    "--payload",
    type=JSON_VALUE,
    default=_NO_DATA,
    show_default=False,
    help="EXECUTION_IDs only: replay with this payload (JSON, @file).",
)
@click.option("--max-attempts", type=click.IntRange(1, 100), help="EXECUTION_IDs only: a fresh attempt budget.")
@click.option("--backoff", type=DURATION, help="EXECUTION_IDs only: first retry delay.")
@json_option
@pass_api
def dead_letters_replay(
    api: KairosClient,
    execution_ids: tuple[str, ...],
    job_id: str | None,
    since: float | None,
    finished_after: datetime | None,
    finished_before: datetime | None,
    everything: bool,
    most: int | None,
    wait: bool,
    payload: Any,
    max_attempts: int | None,
    backoff: float | None,
    as_json: bool,
) -> None:
    """Replay dead letters: the EXECUTION_IDs given, or every one a filter matches.

    \b
    kairos dead-letters replay 5b0c...                  one execution (optionally --payload, --max-attempts)
    kairos dead-letters replay --job 7f1c... --wait     all of a job's, waiting out the budget
    kairos dead-letters replay --since 2h --max 500     the newest 500 of the last two hours
    """
    filters = [
        flag
        for flag, value in (
            ("--job", job_id),
            ("--since", since),
            ("--finished-after", finished_after),
            ("--finished-before", finished_before),
            ("--all", everything or None),
            ("--max", most),
            ("--wait", wait or None),
        )
        if value is not None
    ]
    edits = [
        flag
        for flag, value in (
            ("--payload", None if payload is _NO_DATA else True),
            ("--max-attempts", max_attempts),
            ("--backoff", backoff),
        )
        if value is not None
    ]
    if execution_ids:
        if filters:
            fail(f"{', '.join(filters)} select dead letters in bulk; leave them out when naming EXECUTION_IDs")
        body: dict[str, Any] = {} if payload is _NO_DATA else {"payload": payload}
        retry = {k: v for k, v in (("maxAttempts", max_attempts), ("backoffSeconds", backoff)) if v is not None}
        if retry:
            body["retry"] = retry
        _replay_each(api, execution_ids, body, as_json)
        return
    if edits:
        fail(f"{', '.join(edits)} apply to EXECUTION_IDs only (bulk replay keeps each job's payload)")
    if not (job_id or since is not None or finished_after or finished_before or everything):
        fail("name EXECUTION_IDs, or select with --job, --since, --finished-after/--finished-before, or --all")
    if since is not None and finished_after is not None:
        fail("give --since or --finished-after, not both")
    started = datetime.now(timezone.utc)
    after = ago(since) if since is not None else finished_after
    # Executions that die while this runs (a replay that failed again) are left for the next run.
    before = min(finished_before, started) if finished_before else started
    if after is not None and after >= before:
        fail("the window is empty: --finished-after must be before --finished-before and now")
    _replay_bulk(api, job_id=job_id, after=after, before=before, most=most, wait=wait, as_json=as_json)


def _replay_each(api: KairosClient, execution_ids: tuple[str, ...], body: dict[str, Any], as_json: bool) -> None:
    done: list[Replayed] = []
    refused: list[dict[str, str]] = []
    with progress() as bar:
        task = bar.add_task("replaying", total=len(execution_ids))
        for execution_id in execution_ids:
            try:
                done.append(api.replay(execution_id, body))
            except Problem as problem:
                if problem.exit_code != 2:
                    raise
                refused.append({"executionId": execution_id, "error": problem.message})
            bar.advance(task)

    def render() -> None:
        if done:
            table(
                ["EXECUTION", "JOB", "STATE", "ATTEMPTS", "READY AT"],
                [
                    (r["executionId"], r["jobId"], r["state"], f"{r['attempt']}/{r['lastAttempt']}", when(r["readyAt"]))
                    for r in done
                ],
            )
        for item in refused:
            sys.stderr.write(f"{item['executionId']}: {item['error']}\n")

    emit({"replayed": done, "refused": refused}, as_json, render)
    if refused:
        sys.stderr.write(f"error: {len(refused)} of {len(execution_ids)} executions were not replayed\n")
        sys.exit(2)


def _resets_at(problem: Problem) -> datetime | None:
    found = _RESETS_AT.search(problem.detail or "")
    try:
        return _instant(found.group(1).rstrip(".;")) if found else None
    except ValueError:
        return None


def _sleep_until(moment: datetime | None) -> None:
    pause = 5.0 if moment is None else (moment - datetime.now(timezone.utc)).total_seconds() + 0.5
    time.sleep(min(max(pause, 0.5), 120.0))


def _replay_bulk(
    api: KairosClient,
    *,
    job_id: str | None,
    after: datetime | None,
    before: datetime,
    most: int | None,
    wait: bool,
    as_json: bool,
) -> None:
    matched = sum(len(rows) for rows, _ in matching(api, job_id=job_id, after=after, before=before, limit=PAGE_MAX))
    goal = matched if most is None else min(matched, most)
    replayed: list[str] = []
    budget: dict[str, Any] = {}
    spent_until: str | None = None
    with progress() as bar:
        task = bar.add_task("replaying", total=goal)
        while len(replayed) < goal:
            want = min(BULK_REPLAY_MAX, goal - len(replayed))
            try:
                out = api.replay_dead_letters(
                    job_id=job_id,
                    limit=want,
                    finished_before=utc_iso(before),
                    finished_after=None if after is None else utc_iso(after),
                )
            except Problem as problem:
                if problem.status != 429:
                    raise
                if not wait:
                    resets_at = _resets_at(problem)
                    spent_until = when(utc_iso(resets_at)) if resets_at else "later"
                    break
                bar.update(task, description="waiting for the replay budget")
                _sleep_until(_resets_at(problem))
                bar.update(task, description="replaying")
                continue
            replayed += out["executionIds"]
            budget = {"budgetLeft": out["budgetLeft"], "budgetResetsAt": out["budgetResetsAt"]}
            bar.advance(task, out["replayed"])
            if out["replayed"] == 0:
                break  # nothing matches any more (replayed meanwhile by someone else)
            if out["replayed"] < want and out["budgetLeft"] > 0:
                break
            if out["budgetLeft"] == 0 and len(replayed) < goal:
                if not wait:
                    spent_until = when(out["budgetResetsAt"])
                    break
                bar.update(task, description="waiting for the replay budget")
                _sleep_until(_instant(out["budgetResetsAt"]))
                bar.update(task, description="replaying")
    complete = spent_until is None

    def render() -> None:
        click.echo(
            f"replayed {len(replayed)} of {matched} matching dead letters"
            + ("" if most is None or most >= matched else f" (--max {most})")
        )

    emit(
        {"replayed": len(replayed), "matched": matched, "complete": complete, "executionIds": replayed, **budget},
        as_json,
        render,
    )
    if not complete:
        sys.stderr.write(
            "error: "
            + problem_line(
                "The tenant's bulk replay budget is spent",
                f"{len(replayed)} of {goal} replayed; it resets at "
                f"{spent_until}: run the command again then, or pass --wait",
                None,
            )
            + "\n"
        )
        sys.exit(2)
