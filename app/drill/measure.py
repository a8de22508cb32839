"""What a drill counts, from what the API acknowledged and what the workers ran.

Pure functions of their inputs (the workers' run records, the acknowledged jobs, the instant of
the fault), so the arithmetic is testable without processes:

* lost: an owed occurrence (see ``traffic.Owed``) that never succeeded: its execution is not
  ``succeeded`` in the surviving database once the drain is over, whether a worker started it or not
  (without that set, as for a drill that cannot read it: that no worker ever started);
* duplicated: an owed occurrence started more than once (at-least-once: the run whose outcome
  was lost, by a killed or stalled worker, is run again under the same idempotency key);
* start lag: an occurrence's first start minus its due instant;
* lag back under 2 s: from the fault to the first start after which no occurrence started 2 s or
  more late (None when starts were still late when the drill ended).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from uuid import UUID

from app.drill.traffic import Owed

LAG_TARGET_S = 2.0


@dataclass(frozen=True)
class Run:
    job_id: UUID
    at: float  # the occurrence's due instant (scheduled_for), unix seconds
    attempt: int
    worker: str
    started: float

    @property
    def key(self) -> tuple[UUID, float]:
        return (self.job_id, round(self.at, 3))


def read_runs(paths: Iterable[Path]) -> list[Run]:
    runs = []
    for path in paths:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            try:
                r = json.loads(line)
                runs.append(Run(UUID(r["job"]), float(r["at"]), int(r["attempt"]), r["worker"], float(r["started"])))
            except (ValueError, KeyError):
                continue  # a line cut short cannot happen (one write each), but never fail a report on one
    return runs


@dataclass(frozen=True)
class Tally:
    owed: int
    ran: int  # owed occurrences that succeeded (without a succeeded set: that started)
    lost: int
    duplicated: int
    lost_examples: list[tuple[UUID, float]]
    lost_keys: list[tuple[UUID, float]]
    lag_back_s: float | None  # None: not back under the target by the end
    max_lag_s: float
    late_after_fault: int  # occurrences first started after the fault that started LAG_TARGET_S late or more
    started: int = 0  # owed occurrences a worker started at least once
    started_not_succeeded: int = 0  # of the lost: started, yet never succeeded


def owed_keys(owed: Iterable[Owed], until: float) -> set[tuple[UUID, float]]:
    return {(o.job_id, round(at, 3)) for o in owed for at in o.occurrences(until)}


def tally(
    owed: Iterable[Owed],
    runs: list[Run],
    *,
    fault_at: float,
    until: float,
    succeeded: set[tuple[UUID, float]] | None = None,
) -> Tally:
    """Count against the occurrences owed up to ``until`` (unix seconds); ``succeeded``: the keys
    (job_id, due instant rounded to the millisecond) whose execution succeeded."""
    expected = owed_keys(owed, until)
    by_key: dict[tuple[UUID, float], list[Run]] = defaultdict(list)
    for run in runs:
        by_key[run.key].append(run)
    started = expected & set(by_key)
    lost = sorted(expected - (started if succeeded is None else succeeded), key=lambda k: k[1])
    duplicated = sum(1 for k in expected if len(by_key.get(k, ())) > 1)
    firsts = sorted(
        (min(rs, key=lambda r: r.started) for k, rs in by_key.items() if k in expected), key=lambda r: r.started
    )
    lags = [(r.started, r.started - r.at) for r in firsts]
    after = [(started, lag) for started, lag in lags if started >= fault_at]
    late = [i for i, (_, lag) in enumerate(after) if lag >= LAG_TARGET_S]
    if not late:
        lag_back: float | None = 0.0
    elif late[-1] + 1 < len(after):
        lag_back = after[late[-1] + 1][0] - fault_at
    else:
        lag_back = None
    return Tally(
        owed=len(expected),
        ran=len(expected) - len(lost),
        lost=len(lost),
        duplicated=duplicated,
        lost_examples=lost[:5],
        lost_keys=lost,
        lag_back_s=lag_back,
        max_lag_s=max((lag for _, lag in lags), default=0.0),
        late_after_fault=len(late),
        started=len(started),
        started_not_succeeded=sum(1 for k in lost if k in started),
    )


def occurrence_text(job_id: UUID, at_unix: float) -> str:
    """An occurrence as people read it: the job and its due time in UTC, to the millisecond."""
    at = datetime.fromtimestamp(at_unix, timezone.utc)
    return f"{job_id} at {at.strftime('%Y-%m-%dT%H:%M:%S')}.{at.microsecond // 1000:03d}Z"


@dataclass
class Report:
    """The drill's answer: ``key: value`` lines in order; ``ok`` and, with --fail-on-loss, ``lost`` decide
    the exit code."""

    drill: str
    lines: list[tuple[str, str]]
    ok: bool = True
    lost: int = 0  # occurrences owed that never ran (an asynchronous drill may lose some and be ok)

    def add(self, key: str, value: str) -> None:
        self.lines.append((key, value))

    def exit_code(self, *, fail_on_loss: bool) -> int:
        """0 when the drill met its bar (and, with ``fail_on_loss``, lost nothing), else 1."""
        return 0 if self.ok and not (fail_on_loss and self.lost) else 1

    def render(self) -> str:
        return "\n".join([f"drill: {self.drill}", *(f"{k}: {v}" for k, v in self.lines)])
