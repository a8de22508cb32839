"""The pure parts of self-healing: connection options, liveness checks, the dispatch-progress watchdog."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

from app.observability.probes import Liveness
from app.scheduler.dispatcher import BatchResult
from app.scheduler.service import DispatchProgress
from app.store.db import session_options


def test_session_options_add_both_server_side_bounds_to_the_urls_own() -> None:
    assert session_options("postgresql://u@h/db", 0) is None
    assert session_options("postgresql://u@h/db", 2.5) == (
        "-c statement_timeout=2500 -c idle_in_transaction_session_timeout=2500")
    assert session_options("postgresql://u@h/db?options=-c%20search_path%3Dkairos", 1) == (
        "-c search_path=kairos -c statement_timeout=1000 -c idle_in_transaction_session_timeout=1000")


def test_liveness_names_the_first_silent_loop_and_forgets_finished_ones() -> None:
    live = Liveness()
    assert live.silent() is None
    live.watch("a", lambda: None)
    live.watch("b", lambda: "b is stuck")
    assert live.silent() == "b is stuck"
    live.forget("b")
    assert live.silent() is None


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def progress(heap_head: list[float | None], clock: Clock, totals: BatchResult) -> DispatchProgress:
    """A watchdog over a fake dispatcher (its totals) and heap (its head's due time, wall clock)."""
    heap = SimpleNamespace(next_wake_ts=lambda: heap_head[0])
    dispatcher = SimpleNamespace(totals=totals)
    return DispatchProgress(dispatcher, heap, stall_s=6, sit_out_s=3, sit_out_max_s=10, clock=clock,  # type: ignore[arg-type]
                            wall=lambda: datetime.fromtimestamp(clock.t, timezone.utc))


def test_a_dispatcher_that_finishes_nothing_while_work_is_overdue_stands_down_then_rejoins() -> None:
    clock, totals = Clock(), BatchResult()
    head: list[float | None] = [None]
    watch = progress(head, clock, totals)
    clock.t += 10
    assert watch.may_hold()  # nothing due: idle is not stalled
    head[0] = clock.t - 2
    assert watch.may_hold()  # due, but only for 2 s
    head[0] = clock.t - 7
    assert not watch.may_hold()  # due for 7 s and no batch finished for 10 s
    clock.t += 2
    head[0] = None  # the shards (and their entries) were handed back
    assert not watch.may_hold()  # still sitting out (3 s)
    clock.t += 1.5
    assert watch.may_hold()  # back in
    head[0] = clock.t - 7
    clock.t += 6.1
    assert not watch.may_hold()  # stalled again: the sit-out doubles
    clock.t += 5
    assert not watch.may_hold()
    clock.t += 1.5
    assert watch.may_hold()
    assert watch.stand_downs == 2


def test_a_finished_batch_counts_as_progress_however_old_the_backlog() -> None:
    clock, totals = Clock(), BatchResult()
    head: list[float | None] = [clock.t - 3600]  # an hour of backlog after downtime
    watch = progress(head, clock, totals)
    for _ in range(10):
        clock.t += 5
        totals.ready += 2000  # a batch finished
        assert watch.may_hold()
