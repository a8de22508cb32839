"""The shape every background duty shares: a loop that pauses between passes and a supervisor.

A duty (ShardLeaser, DueLoader, Dispatcher, LeaseReaper, HttpPool ...) has ``run(stop)``, a loop
around ``run_once()`` that logs failures and keeps going. ``supervise`` restarts a duty that
crashed anyway, with backoff, until ``stop`` is set; ``pause`` is the wait between passes that a
stop or a wake-up hint cuts short (hints are only hints: the timeout is the guarantee).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

R = TypeVar("R")

log = logging.getLogger(__name__)


async def pause(seconds: float, stop: asyncio.Event, *wakes: asyncio.Event) -> None:
    """Wait up to ``seconds``; return early once ``stop`` or any of ``wakes`` is set."""
    waiters = [asyncio.ensure_future(e.wait()) for e in (stop, *wakes)]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()


async def supervise(
    name: str,
    duty: Callable[[], Awaitable[None]],
    stop: asyncio.Event,
    *,
    backoff_s: float = 0.5,
    max_backoff_s: float = 15.0,
) -> None:
    """Run ``duty`` until it returns or ``stop`` is set; a crash is logged and the duty restarted with backoff."""
    delay = backoff_s
    while not stop.is_set():
        try:
            await duty()
            return
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("duty crashed; restarting", extra={"duty": name, "backoff_s": delay})
        await pause(delay, stop)
        delay = min(max_backoff_s, delay * 2)


async def run_every(
    name: str,
    interval_s: float,
    stop: asyncio.Event,
    run_once: Callable[[], Awaitable[R]],
    *,
    again: Callable[[R], bool] = lambda _result: False,
    wakes: tuple[asyncio.Event, ...] = (),
    on_error: Callable[[], object] = lambda: None,
) -> None:
    """A duty's loop: ``run_once`` every ``interval_s`` until ``stop``; a failed pass is logged, then
    ``on_error()`` runs and the loop keeps going; ``again(result)`` true runs the next pass at once
    (more work is waiting). ``wakes`` are cleared before each pass, so a hint that arrives while a
    pass runs cuts the next pause short instead of being lost."""
    while not stop.is_set():
        for wake in wakes:
            wake.clear()
        try:
            if again(await run_once()):
                await asyncio.sleep(0)  # a bounded pass; the rest follows at once, after others had a turn
                continue
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("duty pass failed", extra={"duty": name})
            on_error()
        await pause(interval_s, stop, *wakes)
