"""Process start-up shared by every tier: settings -> logging -> database -> serve until signalled."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TypeVar

from app import errors, observability
from app.cli.usage import fail
from app.config import Settings, load
from app.observability import tracing
from app.observability.probes import heartbeat, serve_probes
from app.store import Database, embedded, health, migrate

log = logging.getLogger(__name__)
T = TypeVar("T")

# /readyz on the metrics port: a database that does not answer a ping within this long is unreachable.
READY_PING_TIMEOUT_S = 2.0
# A tier that cannot reach the database at start tries again after this long, doubling up to the max.
OPEN_RETRY_S = 0.5
OPEN_RETRY_MAX_S = 5.0
# Young-generation threshold of the collector once a tier runs (CPython's default is 700 allocations).
GC_YOUNG_THRESHOLD = 100_000


def database_url(settings: Settings) -> str:
    """KAIROS_DATABASE_URL, or the embedded server under KAIROS_HOME (started or joined)."""
    if settings.database_url:
        return settings.database_url
    return embedded.start(settings.pgdata)


async def open_database(settings: Settings, *, upgrade: bool = True, name: str = "") -> Database:
    """The process's database, migrated first unless ``upgrade`` is False (migrations run on a connection of
    their own without the statement timeout: DDL on a big table may legitimately take long)."""
    url = database_url(settings)
    if upgrade:
        admin = Database.from_settings(settings, url, name=f"{name}-migrate" if name else "", bounded=False)
        try:
            await migrate.upgrade(admin)
        finally:
            await admin.close()
    return Database.from_settings(settings, url, name=name)


async def open_database_patiently(settings: Settings, name: str, stop: asyncio.Event) -> Database | None:
    """``open_database``, tried again with backoff while the database is unreachable (a tier started while
    it restarts waits for it instead of exiting); None when ``stop`` is set first."""
    delay = OPEN_RETRY_S
    while not stop.is_set():
        try:
            return await open_database(settings, name=name)
        except errors.DatabaseUnavailable as exc:
            log.warning(
                "database unreachable at start; retrying",
                extra={"service": name, "error": exc.detail[:300], "in_s": delay},
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(OPEN_RETRY_MAX_S, delay * 2)
    return None


def run_command(work: Callable[[Database], Awaitable[T]], *, upgrade: bool = True) -> T:
    """Run one CLI command's ``work(db)`` against the configured (or embedded) database.

    Bad input (InvalidInput, TenantNotFound) exits 2 with one line; an unreachable database exits 1.
    """

    settings = load()

    async def main() -> T:
        db = await open_database(settings, upgrade=upgrade)
        try:
            return await work(db)
        finally:
            await db.close()

    try:
        return asyncio.run(main())
    except errors.InvalidInput as exc:
        fail(f"{exc.field}: {exc.detail}")
    except errors.TenantNotFound as exc:
        fail(exc.detail)
    except errors.DatabaseUnavailable as exc:
        sys.stderr.write(f"error: database unavailable: {exc.detail}\n")
        sys.exit(1)


Serve = Callable[[Settings, Database, asyncio.Event], Awaitable[None]]


async def database_ready(db: Database | None) -> str | None:
    """None when ``db`` answers a ping in time, else why not (what /readyz on the metrics port says)."""
    if db is None:
        return "starting: the database is not open yet"
    try:
        await asyncio.wait_for(health.ping(db), READY_PING_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001 - any failure to reach the database means not ready
        return f"database unreachable: {type(exc).__name__}: {exc}"[:300]
    return None


def settle_gc() -> None:
    """Tune the garbage collector for a tier that has finished starting.

    Everything alive after start (modules, the application, caches) is moved out of the collector's
    sight (``gc.freeze``), and the young generation is collected every GC_YOUNG_THRESHOLD allocations
    instead of 700: a batch of work allocates tens of thousands of short-lived objects, and at the
    default threshold many of them were promoted and then traversed again by older collections,
    together with every object of the running process. POST /v1/jobs from 64 clients ran 25-30 %
    faster, a batch 10-35 % (docs/performance.md, "Submit")."""
    gc.collect()
    gc.freeze()
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, older, oldest)


def run_service(
    name: str, settings: Settings, serve: Serve, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
) -> None:
    """Run one tier until SIGTERM/SIGINT, then let it shut down gracefully.

    The metrics port (KAIROS_METRICS_PORT, unless 0) is served from before the database is opened
    (``/healthz`` answers during migrations, ``/readyz`` once the database answers) until the end. A
    database that is unreachable at start is waited for (``open_database_patiently``); once the tier
    runs, its duties ride out outages by themselves.
    """
    observability.setup_logging(settings.log_level, settings.log_format, name)
    observability.setup_metrics(name, otlp_endpoint=settings.otlp_endpoint, otlp_interval_s=settings.otlp_interval_s)
    tracing.setup_tracing(name, settings.otlp_endpoint)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        opened: list[Database] = []

        async def metrics() -> bytes:
            return observability.exposition()

        probes = None
        if settings.metrics_port:
            probes = await serve_probes(
                settings.metrics_host,
                settings.metrics_port,
                metrics=metrics,
                ready=lambda: database_ready(opened[0] if opened else None),
                token=settings.supervisor_token,
                metrics_token=settings.metrics_token,
            )
        beating = None
        if settings.up_heartbeat_file:  # `kairos up`'s liveness check, from the first second like the probes
            beating = asyncio.create_task(
                heartbeat(settings.up_heartbeat_file, settings.supervisor_token), name=f"{name}-heartbeat"
            )
        try:
            db = await open_database_patiently(settings, name, stop)
            if db is None:
                return
            opened.append(db)
            settle_gc()
            log.info("starting", extra={"service": name})
            try:
                await serve(settings, db, stop)
            finally:
                await db.close()
                log.info("stopped", extra={"service": name})
        finally:
            if beating is not None:
                beating.cancel()
            if probes is not None:
                probes.close()

    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main())
    finally:
        observability.shutdown_metrics()
        tracing.shutdown_tracing()
