"""The drills' arithmetic (app/drill/measure.py): lost, duplicated, start lag and its recovery."""

from __future__ import annotations

from uuid import uuid4

from app.drill.measure import Run, tally
from app.drill.traffic import Owed

FAULT = 1000.0


def test_lost_duplicated_and_lag_back_under_two_seconds() -> None:
    a, b, c, cron = uuid4(), uuid4(), uuid4(), uuid4()
    owed = [
        Owed(a, "steady", 999.0),
        Owed(b, "steady", 1001.0),
        Owed(c, "herd", 1002.0),
        Owed(cron, "recurring", 990.0, every_s=10.0),
    ]
    runs = [
        Run(a, 999.0, 1, "w1", 999.1),  # on time, before the fault
        Run(a, 999.0, 2, "w2", 1006.0),  # its worker died: run again (duplicated, not a lag)
        Run(b, 1001.0, 1, "w2", 1005.5),  # 4.5 s late: the takeover
        Run(cron, 990.0, 1, "w1", 990.2),
        Run(cron, 1000.0, 1, "w2", 1006.1),  # 6.1 s late, the last late start
        Run(cron, 1010.0, 1, "w2", 1010.3),  # on time again: lag back 10.3 s after the fault
    ]  # c never ran; cron@1020 is past `until`, not owed
    result = tally(owed, runs, fault_at=FAULT, until=1015.0)
    assert (result.owed, result.ran, result.lost, result.duplicated) == (6, 5, 1, 1)
    assert result.lost_examples == [(c, 1002.0)]
    assert result.lag_back_s == 1010.3 - FAULT
    assert result.late_after_fault == 2
    assert round(result.max_lag_s, 1) == 6.1


def test_lag_never_back_when_the_last_start_is_late_and_zero_when_nothing_was() -> None:
    job = uuid4()
    late = tally([Owed(job, "herd", 1001.0)], [Run(job, 1001.0, 1, "w", 1009.0)], fault_at=FAULT, until=1010.0)
    assert late.lag_back_s is None
    on_time = tally([Owed(job, "herd", 1001.0)], [Run(job, 1001.0, 1, "w", 1001.2)], fault_at=FAULT, until=1010.0)
    assert on_time.lag_back_s == 0.0 and on_time.lost == 0


def test_a_lost_occurrence_is_shown_with_its_time_and_a_loss_fails_the_drill_on_request() -> None:
    from uuid import UUID

    from app.drill.measure import Report, occurrence_text

    job = UUID("6f1c0a8e-2b7d-4c1e-9a43-0c2f5e7b9d10")
    assert occurrence_text(job, 1796256000.25) == f"{job} at 2026-12-03T00:00:00.250Z"
    report = Report("db-failover", [])
    assert report.exit_code(fail_on_loss=True) == 0
    report.lost = 2  # an asynchronous drill may lose work and still be ok ...
    assert report.ok and report.exit_code(fail_on_loss=False) == 0
    assert report.exit_code(fail_on_loss=True) == 1  # ... unless the caller says a loss fails it
    report.ok = False
    assert report.exit_code(fail_on_loss=False) == 1
