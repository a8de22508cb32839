"""``every`` with a time zone: whole days at the anchor's wall-clock time, across DST, by the cron gap and
repeat rules; without one, elapsed time as before."""

from __future__ import annotations

import itertools
from datetime import datetime, timedelta, timezone

import pytest

from app.domain import jobs
from app.domain import schedule as cron
from app.errors import InvalidSchedule

UTC = timezone.utc
LONDON = "Europe/London"


def utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def nominals(grid: jobs.EverySchedule, after: datetime, n: int) -> list[tuple[str, bool]]:
    return [
        (o.nominal_utc.strftime("%m-%dT%H:%M"), o.skipped) for o in itertools.islice(grid.occurrences_after(after), n)
    ]


def test_a_day_in_a_zone_keeps_the_local_time_across_spring_forward() -> None:
    # 09:00 GMT on 27 March 2026; the clocks go forward on the 29th: 09:00 BST is 08:00 UTC.
    grid = jobs.every_schedule("1d", None, utc("2026-03-27T09:00"), utc("2026-03-20T00:00"), tz=LONDON)
    assert grid.first == utc("2026-03-27T09:00")
    assert nominals(grid, utc("2026-03-27T09:00"), 3) == [
        ("03-28T09:00", False),
        ("03-29T08:00", False),
        ("03-30T08:00", False),
    ]
    assert grid.next_after(utc("2026-03-29T07:00")) == utc("2026-03-29T08:00")
    # Without a zone the same interval is elapsed time: 24 hours, 09:00 UTC every day.
    fixed = jobs.every_schedule("1d", None, utc("2026-03-27T09:00"), utc("2026-03-20T00:00"))
    assert fixed.next_after(utc("2026-03-29T07:00")) == utc("2026-03-29T09:00")


def test_a_wall_time_in_the_gap_shifts_to_the_transition_or_is_skipped() -> None:
    start = utc("2026-03-28T01:30")  # 01:30 GMT; on the 29th 01:30 does not exist (01:00 GMT -> 02:00 BST)
    shift = jobs.every_schedule("1d", None, start, start - timedelta(days=1), tz=LONDON)
    [moved] = list(itertools.islice(shift.occurrences_after(start), 1))
    assert (moved.nominal_utc, moved.skipped) == (utc("2026-03-29T01:00"), False)
    assert moved.dst_note and "moved to 02:00 BST" in moved.dst_note
    # The next day is 01:30 BST again: the gap does not move the grid.
    assert shift.next_after(moved.nominal_utc) == utc("2026-03-30T00:30")
    skip = jobs.every_schedule("1d", None, start, start - timedelta(days=1), tz=LONDON, dst=cron.DstPolicy(gap="skip"))
    assert nominals(skip, start, 2) == [("03-29T01:00", True), ("03-30T00:30", False)]
    assert skip.next_after(start) == utc("2026-03-30T00:30")


@pytest.mark.parametrize("repeat, expected", [("once", ["10-25T00:30"]), ("twice", ["10-25T00:30", "10-25T01:30"])])
def test_a_repeated_wall_time_runs_once_or_twice(repeat: str, expected: list[str]) -> None:
    start = utc("2026-10-24T00:30")  # 01:30 BST; on the 25th 01:30 comes twice (BST, then GMT)
    grid = jobs.every_schedule(
        "1d",
        None,
        start,
        start - timedelta(days=1),
        tz=LONDON,
        dst=cron.DstPolicy(repeat=repeat),  # type: ignore[arg-type]
    )
    got = nominals(grid, start, len(expected) + 1)
    assert got == [(t, False) for t in expected] + [("10-26T01:30", False)]


def test_a_week_steps_seven_calendar_days_and_newest_finds_the_last_run() -> None:
    grid = jobs.every_schedule("7d", None, utc("2026-03-23T09:00"), utc("2026-03-01T00:00"), tz=LONDON)
    assert grid.next_after(utc("2026-03-23T09:00")) == utc("2026-03-30T08:00")
    assert grid.newest_at_or_before(utc("2026-04-02T00:00")) == utc("2026-03-30T08:00")
    assert grid.newest_at_or_before(utc("2026-03-23T08:59")) is None


def test_without_start_at_the_first_run_is_the_submits_wall_time_one_interval_later() -> None:
    now = utc("2026-03-28T12:15:07")  # 12:15:07 GMT; the next day is BST
    grid = jobs.every_schedule("1d", None, None, now, tz=LONDON)
    assert grid.first == utc("2026-03-29T11:15:07")


@pytest.mark.parametrize("every", ["2h", "1d6h", "90m"])
def test_a_zone_with_an_interval_that_is_not_whole_days_is_refused(every: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        jobs.every_schedule(every, None, None, utc("2026-03-28T12:00"), tz=LONDON)
    assert caught.value.field == "schedule.tz" and "whole days" in str(caught.value)


def test_an_unknown_zone_and_dst_without_a_zone_are_refused() -> None:
    with pytest.raises(InvalidSchedule) as caught:
        jobs.every_schedule("1d", None, None, utc("2026-03-28T12:00"), tz="Europe/Lindon")
    assert caught.value.field == "schedule.tz"
    with pytest.raises(InvalidSchedule) as caught:
        jobs.every_schedule("1d", None, None, utc("2026-03-28T12:00"), dst=cron.DstPolicy(gap="skip"))
    assert caught.value.field == "schedule.dst"


@pytest.mark.parametrize("tz", ["Europe/London", "America/New_York", "Australia/Lord_Howe", "Asia/Kolkata"])
@pytest.mark.parametrize("days", [1, 3, 7])
def test_the_grid_keeps_its_wall_time_increases_and_resumes_from_any_instant(tz: str, days: int) -> None:
    """Two years of a zoned grid: instants strictly increase, every occurrence no DST rule moved reads the
    anchor's wall-clock time, and the grid walked from any instant is the whole grid's tail."""
    anchor = utc("2026-01-03T01:45")  # a time some of these zones skip or repeat
    grid = jobs.every_schedule(f"{days}d", None, anchor, anchor - timedelta(days=1), tz=tz)
    whole = list(itertools.islice(grid.occurrences_after(anchor - timedelta(seconds=1)), 730 // days))
    instants = [o.nominal_utc for o in whole]
    assert instants == sorted(set(instants)) and instants[0] == anchor
    wall = anchor.astimezone(whole[0].local.tzinfo).strftime("%H:%M")
    assert all(o.local.strftime("%H:%M") == wall for o in whole if o.dst_note is None)
    for probe in range(0, len(whole) - 3, 17):
        after = whole[probe].nominal_utc + timedelta(hours=probe % 30 - 10)
        tail = [o.nominal_utc for o in itertools.islice(grid.occurrences_after(after), 3)]
        assert tail == [t for t in instants if t > after][:3]


def test_a_day_the_gap_skips_before_the_first_run_is_listed_for_history_as_cron_does() -> None:
    start = utc("2026-03-27T01:30")  # 01:30 GMT daily; 01:30 on the 29th does not exist
    now = utc("2026-03-29T00:30")
    grid = jobs.every_schedule("1d", None, start, now, tz=LONDON, dst=cron.DstPolicy(gap="skip"))
    assert grid.first == utc("2026-03-30T00:30")
    assert [(o.nominal_utc, o.reason) for o in grid.skipped_before_first(now)] == [(utc("2026-03-29T01:00"), "dst_gap")]
    assert jobs.every_schedule("1d", None, start, now, tz=LONDON).skipped_before_first(now) == ()
