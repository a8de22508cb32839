"""app.duties.run_every: the loop every background duty shares. No I/O; long intervals prove a
pass was not waited for."""

from __future__ import annotations

import asyncio

from app.duties import run_every

FOREVER_S = 3600.0


async def test_a_failed_pass_is_logged_then_on_error_runs_and_the_loop_goes_on() -> None:
    stop, calls, errors = asyncio.Event(), [], []

    async def run_once() -> bool:
        calls.append(len(calls))
        if len(calls) == 1:
            raise RuntimeError("database unreachable")
        stop.set()
        return False

    await asyncio.wait_for(run_every("t", 0.0, stop, run_once, on_error=lambda: errors.append("expired")), 5)
    assert calls == [0, 1] and errors == ["expired"]


async def test_again_runs_the_next_pass_without_pausing() -> None:
    stop, left = asyncio.Event(), [3]

    async def run_once() -> int:
        left[0] -= 1
        if left[0] == 0:
            stop.set()
        return left[0]

    await asyncio.wait_for(run_every("t", FOREVER_S, stop, run_once, again=lambda more: more > 0), 5)
    assert left == [0]


async def test_a_wake_during_a_pass_cuts_the_next_pause_short() -> None:
    stop, wake, passes = asyncio.Event(), asyncio.Event(), []
    wake.set()  # a stale hint from before the loop started is cleared, not obeyed

    async def run_once() -> None:
        passes.append(wake.is_set())
        if len(passes) == 1:
            wake.set()  # new work arrived while this pass ran
        else:
            stop.set()

    await asyncio.wait_for(run_every("t", FOREVER_S, stop, run_once, wakes=(wake,)), 5)
    assert passes == [False, False]
