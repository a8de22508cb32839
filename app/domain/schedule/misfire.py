"""Misfire maths: what was missed while Kairos was down, counted without listing it all.

Outside the hours around an offset change every wall-clock match is exactly one occurrence, so
counting there is arithmetic over days and times of day; only the windows around DST changes
and the newest ``cap`` occurrences are walked on the timeline. A year-long outage of a
per-minute job costs a few hundred evaluated wall times.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import deque
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from app.domain.schedule.cron import micros_of_day
from app.domain.schedule.timeline import CronSchedule, Occurrence, Timeline
from app.domain.schedule.zone import as_utc, unsettled_windows


@dataclass(frozen=True)
class MisfirePlan:
    run: list[Occurrence]  # occurrences to execute now, oldest first
    skipped_count: int  # how many missed occurrences will not run
    newest_skipped: Occurrence | None  # the newest one not run, when it is among those listed


def _count(timeline: Timeline, start: datetime, end: datetime, windows: list[tuple[datetime, datetime]]) -> int:
    """How many non-skipped occurrences have start < nominal_utc <= end."""
    total = 0
    cursor = start
    for window_start, window_end in windows:
        if window_end <= cursor or window_start >= end:
            continue
        if window_start > cursor:
            total += _count_settled(timeline, cursor, window_start)
            cursor = window_start
        stop = min(window_end, end)
        for occurrence in timeline.occurrences(cursor):
            if occurrence.nominal_utc > stop:
                break
            total += not occurrence.skipped
        cursor = stop
    if cursor < end:
        total += _count_settled(timeline, cursor, end)
    return total


def _count_settled(timeline: Timeline, start: datetime, end: datetime) -> int:
    """Occurrences in (start, end] when the UTC offset is constant there: wall matches."""
    offset = start.astimezone(timeline.zone).utcoffset()
    assert offset is not None
    first_wall = (start + offset).replace(tzinfo=None)
    last_wall = (end + offset).replace(tzinfo=None)
    return _count_walls(timeline, first_wall, last_wall)


def _count_walls(timeline: Timeline, after: datetime, until: datetime) -> int:
    """Matching wall times w with after < w <= until, a day at a time."""
    if until <= after:
        return 0
    times = timeline.cron.times_of_day_us
    after_us, until_us = micros_of_day(after), micros_of_day(until)
    first_day, last_day = after.date(), until.date()
    matches = timeline.cron.matches_date
    if first_day == last_day:
        if not matches(first_day):
            return 0
        return bisect_right(times, until_us) - bisect_right(times, after_us)
    total = 0
    if matches(first_day):
        total += len(times) - bisect_right(times, after_us)
    if matches(last_day):
        total += bisect_right(times, until_us)
    day = first_day + timedelta(days=1)
    whole_days = 0
    while day < last_day:
        whole_days += matches(day)
        day += timedelta(days=1)
    return total + whole_days * len(times)


def missed_occurrences(
    schedule: CronSchedule, last_nominal_utc: datetime, now_utc: datetime, job_key: str, cap: int = 100
) -> tuple[list[Occurrence], int]:
    """Non-skipped occurrences with last_nominal_utc < nominal_utc <= now_utc.

    Returns (the newest ``cap`` of them, oldest first; how many there are in all). The total is
    counted arithmetically outside the hours around DST changes, and only the newest ``cap`` are
    listed, so a year-long outage of a per-minute job costs a few hundred evaluated wall times.
    """
    if cap < 0:
        raise ValueError("cap must not be negative")
    timeline = Timeline.of(schedule, job_key)
    start, end = as_utc(last_nominal_utc, "last_nominal_utc"), as_utc(now_utc, "now_utc")
    if end <= start:
        return [], 0
    windows = unsettled_windows(timeline.zone, start, end)
    total = _count(timeline, start, end, windows)
    if total == 0 or cap == 0:
        return [], total
    # Find a recent start that still holds the newest min(cap, total), growing the tail 4x at a
    # time, then list only that tail.
    wanted = min(cap, total)
    span = timedelta(hours=1)
    while True:
        tail_start = max(start, end - span)
        if tail_start == start or _count(timeline, tail_start, end, windows) >= wanted:
            break
        span *= 4
    newest: deque[Occurrence] = deque(maxlen=cap)
    for occurrence in timeline.occurrences(tail_start):
        if occurrence.nominal_utc > end:
            break
        if not occurrence.skipped:
            newest.append(occurrence)
    return list(newest), total


def plan_misfire(
    policy: Literal["run_once", "catch_up", "skip"],
    missed: list[Occurrence],
    total_missed: int,
    cap: int = 100,
) -> MisfirePlan:
    """What to do about occurrences missed while Kairos was down.

    ``missed`` is the newest part (oldest first) of ``total_missed`` missed occurrences, as
    returned by missed_occurrences. run_once: only the newest runs; catch_up: the newest
    min(cap, total) run, in order; skip: none run.
    """
    if total_missed < len(missed):
        raise ValueError("total_missed counts every missed occurrence, so it cannot be less than len(missed)")
    if cap < 0:
        raise ValueError("cap must not be negative")
    if policy == "run_once":
        run = missed[-1:]
    elif policy == "catch_up":
        run = missed[len(missed) - min(cap, len(missed)) :]
    elif policy == "skip":
        run = []
    else:
        raise ValueError(f"unknown misfire policy {policy!r}")
    not_run = missed[: len(missed) - len(run)]
    return MisfirePlan(
        run=list(run),
        skipped_count=total_missed - len(run),
        newest_skipped=not_run[-1] if not_run else None,
    )
