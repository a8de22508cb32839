"""What a drill counts as lost: an acknowledged occurrence that never succeeded, started or not."""

from __future__ import annotations

from uuid import uuid4

from app.drill.measure import Run, tally
from app.drill.traffic import Owed

FAULT = 1000.0


def test_an_occurrence_started_but_never_succeeded_is_lost() -> None:
    done, started_only, never = uuid4(), uuid4(), uuid4()
    owed = [Owed(done, "herd", 1001.0), Owed(started_only, "herd", 1001.0), Owed(never, "steady", 1002.0)]
    runs = [Run(done, 1001.0, 1, "w1", 1001.1), Run(started_only, 1001.0, 1, "w1", 1001.1)]
    result = tally(owed, runs, fault_at=FAULT, until=1010.0, succeeded={(done, 1001.0)})
    assert (result.owed, result.started, result.ran, result.lost) == (3, 2, 1, 2)
    assert set(result.lost_keys) == {(started_only, 1001.0), (never, 1002.0)}
    assert result.started_not_succeeded == 1
