"""``kairos history ...``: execution-history archives (app.executor.retention; docs/retention.md).

Operator commands on the database and the object store the settings name (KAIROS_DATABASE_URL,
KAIROS_ARCHIVE_URL), like ``kairos tenants``: they need no running Kairos.
"""

from __future__ import annotations

import json
from typing import Any

import click

from app import errors
from app.cli.runtime import run_command
from app.cli.usage import fail
from app.config import load
from app.store import Database


@click.group()
def history() -> None:
    """Execution-history archives: run the retention pass by hand, list archives, restore one."""


def _objects() -> Any:
    from app.executor.retention import objects_for

    try:
        return objects_for(load())
    except errors.ObjectStoreUnavailable as exc:
        fail(exc.detail)


@history.command("archive")
@click.option(
    "--now",
    "now_",
    is_flag=True,
    required=True,
    help="Run the retention pass now, here (the executors also run it every KAIROS_RETENTION_INTERVAL_S).",
)
@click.option(
    "--days",
    type=click.IntRange(1, 100_000),
    default=None,
    help="Archive what finished more than this many days ago (default KAIROS_RETENTION_DAYS).",
)
@click.option(
    "--max-batches",
    type=click.IntRange(1, 1_000_000),
    default=None,
    help="Stop after this many batches (KAIROS_RETENTION_BATCH executions each).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON line per archive.")
def history_archive(now_: bool, days: int | None, max_batches: int | None, as_json: bool) -> None:
    """Archive finished executions older than the retention to the object store, then delete them."""
    from dataclasses import replace

    from app.executor.retention import RetentionConfig, RetentionPruner

    settings = load()
    config = RetentionConfig.from_settings(settings)
    if days is not None:
        config = replace(config, retention_days=days)
    if config.retention_days == 0:
        fail("KAIROS_RETENTION_DAYS is 0 (keep everything): give --days N to archive anyway")
    objects = _objects()

    async def work(db: Database) -> list[Any]:
        return await RetentionPruner(db, objects, config).drain(max_batches=max_batches)

    batches = _run(work)
    for b in batches:
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "archive": b.key,
                        "executions": b.executions,
                        "attempts": b.attempts,
                        "bytes": b.bytes,
                        "oldestFinishedAt": b.oldest.isoformat() if b.oldest else None,
                        "newestFinishedAt": b.newest.isoformat() if b.newest else None,
                    }
                )
            )
        else:
            click.echo(f"{b.key}\t{b.executions} executions\t{b.attempts} attempts\t{b.bytes} bytes")
    if not as_json:
        total = sum(b.executions for b in batches)
        click.echo(
            f"archived {total} execution(s) finished over {config.retention_days:g} days ago "
            f"in {len(batches)} archive(s) to {objects.url}"
        )


@history.command("list")
@click.option(
    "--prefix", default="history", show_default=True, help="A folder of the object store, e.g. history/2026/11."
)
def history_list(prefix: str) -> None:
    """The archives in the object store, oldest first."""
    import asyncio

    objects = _objects()
    if not prefix.startswith("history") or ".." in prefix.split("/"):
        fail("--prefix is history or a folder under it, e.g. history/2026/11")
    try:
        keys = asyncio.run(objects.list(prefix))
    except errors.ObjectStoreUnavailable as exc:
        raise click.ClickException(exc.detail) from None
    if not keys:
        click.echo(f"no archives under {prefix} in {objects.url}")
    for key in keys:
        click.echo(key)


@history.command("restore")
@click.argument("archive")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def history_restore(archive: str, as_json: bool) -> None:
    """Load ARCHIVE (a key such as history/2026/11/03/...jsonl.gz, or a file) back into executions and attempts.

    Idempotent: rows already present stay as they are. Restored executions are visible in the API
    again and stay for KAIROS_RETENTION_DAYS after the restore before they are archived again.
    """
    from app.executor.retention import restore

    objects = _objects()
    done = _run(lambda db: restore(db, objects, archive))
    if as_json:
        click.echo(
            json.dumps(
                {
                    "archive": done.archive,
                    "executions": done.executions,
                    "attempts": done.attempts,
                    "executionsInArchive": done.executions_in_archive,
                    "attemptsInArchive": done.attempts_in_archive,
                }
            )
        )
    else:
        click.echo(
            f"restored {done.executions} of {done.executions_in_archive} execution(s) and {done.attempts} of "
            f"{done.attempts_in_archive} attempt(s) from {archive} (the rest were there already)"
        )


def _run(work: Any) -> Any:
    """run_command, with the object store's failures as one line: a missing archive is bad input (2)."""
    try:
        return run_command(work)
    except errors.ObjectNotFound as exc:
        fail(exc.detail)
    except errors.ObjectStoreUnavailable as exc:
        raise click.ClickException(exc.detail) from None
