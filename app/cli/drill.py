"""``kairos drill region-failover | db-failover | scheduler-kill | worker-stall``: failure drills on one machine.

Each drill starts what it needs (PostgreSQL from the installed binaries, Kairos processes, SDK
workers) in a temporary directory, injects its fault, prints a report and removes everything it
started, also on Ctrl-C, SIGTERM, a failure or its own --timeout. Exit status: 0 when nothing owed
was lost (lost: acknowledged, never succeeded; the asynchronous failovers only measure, so they
pass whatever they lost), 1 when something was lost or the drill could not finish, 2 on bad
options. docs/regions.md and the runbooks say what each line means.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from app import observability
from app.drill.cluster import PG_BIN_DEFAULT

F = TypeVar("F", bound=Callable[..., Any])


def _options(*, herd: int = 1000) -> Callable[[F], F]:
    """The options every drill takes; ``herd`` is the drill's default herd size."""
    return lambda func: _with_options(func, herd)


def _with_options(func: F, herd: int) -> F:
    for option in reversed(
        [
            click.option(
                "--timeout",
                "timeout_s",
                type=click.FloatRange(10, 3600),
                default=240.0,
                show_default=True,
                help="Seconds the whole drill may take; it stops, cleans up and fails after that.",
            ),
            click.option(
                "--herd",
                type=click.IntRange(0, 20_000),
                default=herd,
                show_default=True,
                help="One-off jobs all due at one instant, just before the fault.",
            ),
            click.option(
                "--steady",
                "steady_per_s",
                type=click.FloatRange(0.5, 200),
                default=10.0,
                show_default=True,
                help="One-off jobs submitted per second throughout, each due 2 s later.",
            ),
            click.option(
                "--recurring",
                type=click.IntRange(0, 2000),
                default=20,
                show_default=True,
                help="Recurring jobs (every --every seconds, catch-up misfires).",
            ),
            click.option(
                "--every",
                "every_s",
                type=click.IntRange(10, 300),
                default=10,
                show_default=True,
                help="Interval of the recurring jobs, in seconds.",
            ),
            click.option(
                "--warmup",
                "warmup_s",
                type=click.FloatRange(0, 600),
                default=8.0,
                show_default=True,
                help="Seconds of traffic before the fault.",
            ),
            click.option(
                "--observe",
                "observe_s",
                type=click.FloatRange(0, 600),
                default=8.0,
                show_default=True,
                help="Seconds of traffic after the takeover before submitting stops.",
            ),
            click.option(
                "--lease-ttl",
                "lease_ttl_s",
                type=click.FloatRange(1, 60),
                default=3.0,
                show_default=True,
                help="The schedulers' shard lease TTL (KAIROS_LEASE_TTL_S).",
            ),
            click.option(
                "--grace",
                "grace_s",
                type=click.FloatRange(0, 120),
                default=2.0,
                show_default=True,
                help="The standby region's takeover grace (KAIROS_REGION_TAKEOVER_GRACE_S).",
            ),
            click.option(
                "--pg-bin",
                type=click.Path(file_okay=False, path_type=Path),
                default=PG_BIN_DEFAULT,
                show_default=True,
                help="Directory of the PostgreSQL server binaries (initdb, postgres, ...).",
            ),
            click.option("--keep", is_flag=True, help="Keep the drill's directory (process logs) and print where."),
            click.option(
                "--fail-on-loss",
                is_flag=True,
                help="Exit 1 when any owed occurrence was lost, even where the drill allows it (--async): for CI.",
            ),
            click.option("--verbose", is_flag=True, help="Log the drill's own steps on stderr."),
        ]
    ):
        func = option(func)
    return func


@click.group()
def drill() -> None:
    """Failure drills on one machine: inject a fault into real processes and report what it cost."""


def _run(name: str, verbose: bool, fail_on_loss: bool = False, **kwargs: Any) -> None:
    from app.drill.measure import Report
    from app.drill.scenarios import DRILLS, DrillOptions

    observability.setup_logging("INFO" if verbose else "WARNING", "text", "drill")
    if not verbose:
        logging.getLogger("app.drill").setLevel(logging.WARNING)
    try:
        options = DrillOptions(**kwargs)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    if not (options.pg_bin / "postgres").exists():
        raise click.UsageError(f"no PostgreSQL server binaries in {options.pg_bin} (--pg-bin)")

    async def main() -> Report:
        task = asyncio.create_task(DRILLS[name](options))
        loop = asyncio.get_running_loop()
        # SIGTERM and SIGINT cancel the drill, whose clean-up then stops everything it started.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        return await task

    try:
        report = asyncio.run(main())
    except asyncio.CancelledError:
        click.echo(f"drill: {name} interrupted; everything it started was stopped", err=True)
        sys.exit(130)
    except Exception as exc:  # any failure is one line (the traceback with --verbose), exit 1
        if verbose:
            logging.getLogger("app.drill").exception("drill failed")
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        click.echo(f"error: {name} failed: {first}", err=True)
        sys.exit(1)
    click.echo(report.render())
    sys.exit(report.exit_code(fail_on_loss=fail_on_loss))


@drill.command("region-failover")
@click.option(
    "--link-stall",
    "link_stall_s",
    type=click.FloatRange(0, 60),
    default=0.0,
    show_default=True,
    help="Stop the primary's WAL senders this many seconds before the fault, as a stalled link between "
    "the regions would: synchronous commits wait for it, --async ones are acknowledged and lost.",
)
@click.option(
    "--async",
    "asynchronous",
    is_flag=True,
    help="Replicate asynchronously and measure what is lost (default: synchronous, must lose nothing).",
)
@click.option(
    "--failover",
    type=click.Choice(["promote", "patroni"]),
    default="promote",
    show_default=True,
    help="Who promotes the standby: the drill itself at the kill (promote), or Patroni with a "
    "three-member etcd once the leader key expires (patroni; needs the patroni and etcd commands).",
)
@click.option(
    "--patroni-ttl",
    "patroni_ttl_s",
    type=click.IntRange(3, 120),
    default=10,
    show_default=True,
    help="With --failover patroni: the leader key's TTL in etcd (Patroni's ttl; loop_wait is 1 s).",
)
@_options()
def region_failover(asynchronous: bool, verbose: bool, failover: str, **kwargs: Any) -> None:
    """Two regions on two PostgreSQL servers (primary, streaming standby); kill the primary region."""
    if failover == "patroni":
        from app.drill.patroni import missing_binaries

        if missing := missing_binaries():
            raise click.UsageError(
                f"--failover patroni needs {' and '.join(missing)} on PATH "
                "(Debian: apt-get install patroni etcd-server etcd-client)"
            )
    _run("region-failover", verbose, synchronous=not asynchronous, failover=failover, **kwargs)


@drill.command("db-failover")
@click.option(
    "--link-stall",
    "link_stall_s",
    type=click.FloatRange(0, 60),
    default=0.0,
    show_default=True,
    help="Stop the primary's WAL senders this many seconds before the fault, as a stalled link between "
    "the regions would: synchronous commits wait for it, --async ones are acknowledged and lost.",
)
@click.option(
    "--async",
    "asynchronous",
    is_flag=True,
    help="Replicate asynchronously and measure what is lost (default: synchronous, must lose nothing).",
)
@_options()
def db_failover(asynchronous: bool, verbose: bool, **kwargs: Any) -> None:
    """One region on a PostgreSQL primary and streaming standby; kill the primary database only."""
    _run("db-failover", verbose, synchronous=not asynchronous, **kwargs)


@drill.command("scheduler-kill")
@_options()
def scheduler_kill(verbose: bool, **kwargs: Any) -> None:
    """Two schedulers; SIGKILL one and measure until the other owns every shard."""
    _run("scheduler-kill", verbose, **kwargs)


@drill.command("worker-stall")
@_options(herd=200)  # its runs take 0.8 s each: a bigger herd measures the workers' capacity, not the stall
def worker_stall(verbose: bool, **kwargs: Any) -> None:
    """Two SDK workers; SIGSTOP one holding leases, measure the retries elsewhere and the fenced late outcomes."""
    _run("worker-stall", verbose, **kwargs)
