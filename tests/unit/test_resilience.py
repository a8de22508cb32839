"""The pure parts of self-healing: connection options, liveness checks, the dispatch-progress watchdog."""

from __future__ import annotations

from types import SimpleNamespace

from app.observability.probes import Liveness
from app.scheduler.dispatcher import BatchResult
from app.scheduler.service import DispatchProgress
from app.store.db import session_options
from tests.support.clocks import ManualClock


def test_session_options_set_utc_and_add_both_server_side_bounds_to_the_urls_own() -> None:
    assert session_options("postgresql://u@h/db", 0) == "-c timezone=UTC"
    assert session_options("postgresql://u@h/db", 2.5) == (
        "-c timezone=UTC -c statement_timeout=2500 -c idle_in_transaction_session_timeout=2500"
    )
    assert session_options("postgresql://u@h/db?options=-c%20search_path%3Dkairos", 1) == (
        "-c search_path=kairos -c timezone=UTC -c statement_timeout=1000 -c idle_in_transaction_session_timeout=1000"
    )
    # The URL's own time zone comes first, so UTC wins (the last -c of a name is the one that counts).
    assert session_options("cockroachdb://u@h/db?options=-c%20timezone%3DEurope/Berlin", 0) == (
        "-c timezone=Europe/Berlin -c timezone=UTC"
    )


def test_liveness_names_the_first_silent_loop_and_forgets_finished_ones() -> None:
    live = Liveness()
    assert live.silent() is None
    live.watch("a", lambda: None)
    live.watch("b", lambda: "b is stuck")
    assert live.silent() == "b is stuck"
    live.forget("b")
    assert live.silent() is None


def progress(heap_head: list[float | None], clock: ManualClock, totals: BatchResult) -> DispatchProgress:
    """A watchdog over a fake dispatcher (its totals) and heap (its head's due time, wall clock)."""
    heap = SimpleNamespace(next_wake_ts=lambda: heap_head[0])
    dispatcher = SimpleNamespace(totals=totals)
    return DispatchProgress(
        dispatcher,
        heap,
        stall_s=6,
        sit_out_s=3,
        sit_out_max_s=10,
        clock=clock,  # type: ignore[arg-type]
        wall=clock.wall,
    )


def test_a_dispatcher_that_finishes_nothing_while_work_is_overdue_stands_down_then_rejoins() -> None:
    clock, totals = ManualClock(), BatchResult()
    head: list[float | None] = [None]
    watch = progress(head, clock, totals)
    clock.now += 10
    assert watch.may_hold()  # nothing due: idle is not stalled
    head[0] = clock.now - 2
    assert watch.may_hold()  # due, but only for 2 s
    head[0] = clock.now - 7
    assert not watch.may_hold()  # due for 7 s and no batch finished for 10 s
    clock.now += 2
    head[0] = None  # the shards (and their entries) were handed back
    assert not watch.may_hold()  # still sitting out (3 s)
    clock.now += 1.5
    assert watch.may_hold()  # back in
    head[0] = clock.now - 7
    clock.now += 6.1
    assert not watch.may_hold()  # stalled again: the sit-out doubles
    clock.now += 5
    assert not watch.may_hold()
    clock.now += 1.5
    assert watch.may_hold()
    assert watch.stand_downs == 2


def test_a_finished_batch_counts_as_progress_however_old_the_backlog() -> None:
    clock, totals = ManualClock(), BatchResult()
    head: list[float | None] = [clock.now - 3600]  # an hour of backlog after downtime
    watch = progress(head, clock, totals)
    for _ in range(10):
        clock.now += 5
        totals.ready += 2000  # a batch finished
        assert watch.may_hold()
