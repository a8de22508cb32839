"""The drills' arithmetic (app/drill/measure.py): lost, duplicated, start lag and its recovery."""

from __future__ import annotations

from uuid import uuid4

from app.drill.measure import Run, tally
from app.drill.traffic import Owed

FAULT = 1000.0


def test_lost_duplicated_and_lag_back_under_two_seconds() -> None:
    a, b, c, cron = uuid4(), uuid4(), uuid4(), uuid4()
    owed = [Owed(a, "steady", 999.0), Owed(b, "steady", 1001.0), Owed(c, "herd", 1002.0),
            Owed(cron, "recurring", 990.0, every_s=10.0)]
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
