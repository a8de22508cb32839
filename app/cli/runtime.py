"""Process start-up shared by every tier: settings -> logging -> database -> serve until signalled."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

from app import errors, observability
from app.config import Settings, load
from app.store import Database, embedded, migrate

log = logging.getLogger(__name__)
T = TypeVar("T")


def database_url(settings: Settings) -> str:
    """KAIROS_DATABASE_URL, or the embedded server under KAIROS_HOME (started or joined)."""
    if settings.database_url:
        return settings.database_url
    return embedded.start(settings.pgdata)


async def open_database(settings: Settings, *, upgrade: bool = True) -> Database:
    db = Database.from_settings(settings, database_url(settings))
    if upgrade:
        await migrate.upgrade(db)
    return db


def fail(message: str) -> NoReturn:
    """A command's bad input: one line on stderr, exit code 2."""
    sys.stderr.write(f"error: {message}\n")
    sys.exit(2)


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


def run_service(name: str, settings: Settings, serve: Serve,
                loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> None:
    """Run one tier until SIGTERM/SIGINT, then let it shut down gracefully."""
    observability.setup_logging(settings.log_level, settings.log_format, name)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        db = await open_database(settings)
        log.info("starting", extra={"service": name})
        try:
            await serve(settings, db, stop)
        finally:
            await db.close()
            log.info("stopped", extra={"service": name})

    with asyncio.Runner(loop_factory=loop_factory) as runner:
        runner.run(main())
