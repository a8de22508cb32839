"""Wait for a condition with a deadline, never a fixed sleep (STYLE.md, tests)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def poll(
    condition: Callable[[], Awaitable[T]], *, timeout_s: float, interval_s: float = 0.1, what: str = "condition"
) -> T:
    """Await ``condition()`` until it is truthy and return that value; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = await condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        await asyncio.sleep(interval_s)


def wait_for(
    condition: Callable[[], T], *, timeout_s: float = 30.0, interval_s: float = 0.05, what: str = "condition"
) -> T:
    """Call ``condition()`` until it is truthy and return that value; fail after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)
