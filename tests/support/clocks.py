"""A clock that moves only when the test moves it."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone


class ManualClock:
    """Time as the test sets it. Called, it reads like ``time.monotonic`` (seconds, a float);
    ``wall()`` is the same instant as an aware UTC datetime, for code that takes a datetime clock
    (the scheduler's duties). Both views move together: ``advance``, or assign ``now`` or ``at``."""

    def __init__(self, start: float | datetime = 1000.0) -> None:
        self.now = start.timestamp() if isinstance(start, datetime) else float(start)

    def __call__(self) -> float:
        return self.now

    def wall(self) -> datetime:
        return datetime.fromtimestamp(self.now, timezone.utc)

    @property
    def at(self) -> datetime:
        return self.wall()

    @at.setter
    def at(self, value: datetime) -> None:
        self.now = value.timestamp()

    def advance(self, seconds: float | timedelta) -> None:
        self.now += seconds.total_seconds() if isinstance(seconds, timedelta) else seconds
