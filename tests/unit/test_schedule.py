"""Cron schedules on real DST transition days, H tokens, validation, misfire maths.

Expected instants are worked out by hand from the published transitions (noted beside each
case), never produced by the code under test.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone
from itertools import islice, pairwise, takewhile

import pytest
from croniter import croniter

from app.domain.schedule import (
    CronSchedule,
    DstPolicy,
    MisfirePlan,
    Occurrence,
    jitter_offset_s,
    missed_occurrences,
    next_occurrence,
    occurrences_after,
    plan_misfire,
    preview,
    validate_cron,
    validate_tz,
)
from app.domain.schedule.cron import compile_cron
from app.errors import InvalidSchedule

UTC = timezone.utc
SHIFT_ONCE = DstPolicy()
SKIP = DstPolicy(gap="skip")
TWICE = DstPolicy(repeat="twice")


def utc(text: str) -> datetime:
    """'2026-03-08 07:00' as an aware UTC datetime."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


def fires(expr: str, tz: str, after: str, count: int, dst: DstPolicy = SHIFT_ONCE) -> list[Occurrence]:
    return list(islice(occurrences_after(CronSchedule(expr, tz, dst=dst), utc(after), "job-1"), count))


def instants(occurrences: list[Occurrence]) -> list[str]:
    return [o.nominal_utc.strftime("%Y-%m-%d %H:%M") for o in occurrences]


# ---------------------------------------------------------------------------------------------
# Real transition days. NY: EST -5 / EDT -4, change at 02:00 local. London: GMT 0 / BST +1,
# change at 01:00 UTC. Lord Howe: +10:30 / +11, a 30-minute change at 02:00 local.
# ---------------------------------------------------------------------------------------------

TRANSITION_CASES = [
    # --- America/New_York, spring forward 2026-03-08: 02:00 EST -> 03:00 EDT (07:00Z)
    (
        "30 2 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-03-07 00:00",
        ["2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30"],
        [None, "moved to 03:00 EDT", None],
    ),
    (
        "30 2 * * *",
        "America/New_York",
        SKIP,
        "2026-03-07 00:00",
        ["2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30"],
        [None, "02:30 skipped", None],
    ),
    (
        "0 1 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-03-07 12:00",  # 01:00 exists: untouched
        ["2026-03-08 06:00", "2026-03-09 05:00"],
        [None, None],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-03-07 12:00",
        ["2026-03-08 06:30", "2026-03-09 05:30"],
        [None, None],
    ),
    (
        "*/15 2 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-03-08 00:00",
        ["2026-03-08 07:00", "2026-03-09 06:00", "2026-03-09 06:15"],
        ["4 occurrences merged into one", None, None],
    ),
    (
        "*/15 2 * * *",
        "America/New_York",
        SKIP,
        "2026-03-08 00:00",
        ["2026-03-08 07:00", "2026-03-09 06:00"],
        ["02:00, 02:15, 02:30, 02:45 skipped", None],
    ),
    # Wildcard hour: 02:00 and 02:30 fold into the real 03:00 at the transition instant.
    (
        "*/30 * * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-03-08 05:45",
        ["2026-03-08 06:00", "2026-03-08 06:30", "2026-03-08 07:00", "2026-03-08 07:30"],
        [None, None, "3 occurrences merged into one", None],
    ),
    (
        "*/30 * * * *",
        "America/New_York",
        SKIP,
        "2026-03-08 05:45",
        ["2026-03-08 06:00", "2026-03-08 06:30", "2026-03-08 07:00", "2026-03-08 07:30"],
        [None, None, "the 03:00 EDT occurrence runs as usual", None],
    ),
    # --- America/New_York, fall back 2026-11-01: 02:00 EDT -> 01:00 EST (06:00Z)
    (
        "0 1 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-10-31 00:00",
        ["2026-10-31 05:00", "2026-11-01 05:00", "2026-11-02 06:00"],
        [None, "runs once, at the first (EDT)", None],
    ),
    (
        "0 1 * * *",
        "America/New_York",
        TWICE,
        "2026-10-31 00:00",
        ["2026-10-31 05:00", "2026-11-01 05:00", "2026-11-01 06:00", "2026-11-02 06:00"],
        [None, "runs at both (EDT, then EST)", "runs at both (EDT, then EST)", None],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-10-31 00:00",
        ["2026-10-31 05:30", "2026-11-01 05:30", "2026-11-02 06:30"],
        [None, "01:30 occurs twice on 2026-11-01", None],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        TWICE,
        "2026-10-31 00:00",
        ["2026-10-31 05:30", "2026-11-01 05:30", "2026-11-01 06:30", "2026-11-02 06:30"],
        [None, "occurs twice", "occurs twice", None],
    ),
    (
        "30 2 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-10-31 12:00",  # 02:30 is not repeated
        ["2026-11-01 07:30", "2026-11-02 07:30"],
        [None, None],
    ),
    # Wildcard hour follows elapsed time: both copies of 01:xx, in real-time order, each noted.
    (
        "*/30 * * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-11-01 04:00",
        [
            "2026-11-01 04:30",
            "2026-11-01 05:00",
            "2026-11-01 05:30",
            "2026-11-01 06:00",
            "2026-11-01 06:30",
            "2026-11-01 07:00",
        ],
        [
            None,
            (
                "01:00 occurs twice on 2026-11-01 (fall back); a wildcard hour follows elapsed time and runs at "
                "both (EDT, then EST)"
            ),
            "01:30 occurs twice",
            "01:00 occurs twice",
            "01:30 occurs twice",
            None,
        ],
    ),
    (
        "*/15 2 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2026-11-01 06:50",
        ["2026-11-01 07:00", "2026-11-01 07:15"],
        [None, None],
    ),
    # --- America/New_York 2027: spring forward 03-14, fall back 11-07
    (
        "30 2 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2027-03-13 00:00",
        ["2027-03-13 07:30", "2027-03-14 07:00", "2027-03-15 06:30"],
        [None, "does not exist on 2027-03-14", None],
    ),
    (
        "30 2 * * *",
        "America/New_York",
        SKIP,
        "2027-03-13 12:00",
        ["2027-03-14 07:00", "2027-03-15 06:30"],
        ["skipped: does not exist on 2027-03-14", None],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2027-11-06 12:00",
        ["2027-11-07 05:30", "2027-11-08 06:30"],
        ["occurs twice on 2027-11-07", None],
    ),
    (
        "30 1 * * *",
        "America/New_York",
        TWICE,
        "2027-11-06 12:00",
        ["2027-11-07 05:30", "2027-11-07 06:30", "2027-11-08 06:30"],
        ["occurs twice", "occurs twice", None],
    ),
    (
        "*/30 * * * *",
        "America/New_York",
        SHIFT_ONCE,
        "2027-11-07 04:45",
        ["2027-11-07 05:00", "2027-11-07 05:30", "2027-11-07 06:00", "2027-11-07 06:30", "2027-11-07 07:00"],
        ["a wildcard hour follows elapsed time"] * 4 + [None],
    ),
    # --- Europe/London, spring forward 2026-03-29: 01:00 GMT -> 02:00 BST (01:00Z)
    (
        "30 1 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-03-28 00:00",
        ["2026-03-28 01:30", "2026-03-29 01:00", "2026-03-30 00:30"],
        [None, "moved to 02:00 BST", None],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        SKIP,
        "2026-03-28 12:00",
        ["2026-03-29 01:00", "2026-03-30 00:30"],
        ["01:30 skipped", None],
    ),
    (
        "30 2 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-03-28 12:00",
        ["2026-03-29 01:30", "2026-03-30 01:30"],
        [None, None],
    ),
    (
        "0 1 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-03-28 12:00",
        ["2026-03-29 01:00", "2026-03-30 00:00"],
        ["01:00 does not exist on 2026-03-29", None],
    ),
    (
        "*/15 1 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-03-28 23:00",
        ["2026-03-29 01:00", "2026-03-30 00:00"],
        ["4 occurrences merged into one", None],
    ),
    (
        "*/30 * * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-03-29 00:15",
        ["2026-03-29 00:30", "2026-03-29 01:00", "2026-03-29 01:30"],
        [None, "3 occurrences merged", None],
    ),
    # --- Europe/London, fall back 2026-10-25: 02:00 BST -> 01:00 GMT (01:00Z)
    (
        "0 1 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-10-24 12:00",
        ["2026-10-25 00:00", "2026-10-26 01:00"],
        ["runs once, at the first (BST)", None],
    ),
    (
        "0 1 * * *",
        "Europe/London",
        TWICE,
        "2026-10-24 12:00",
        ["2026-10-25 00:00", "2026-10-25 01:00", "2026-10-26 01:00"],
        ["(BST, then GMT)", "(BST, then GMT)", None],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-10-24 12:00",
        ["2026-10-25 00:30", "2026-10-26 01:30"],
        ["occurs twice on 2026-10-25", None],
    ),
    (
        "*/30 * * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2026-10-24 23:45",
        ["2026-10-25 00:00", "2026-10-25 00:30", "2026-10-25 01:00", "2026-10-25 01:30", "2026-10-25 02:00"],
        ["01:00 occurs twice", "01:30 occurs twice", "01:00 occurs twice", "runs at both (BST, then GMT)", None],
    ),
    # --- Europe/London 2027: spring forward 03-28, fall back 10-31
    (
        "30 1 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2027-03-27 12:00",
        ["2027-03-28 01:00", "2027-03-29 00:30"],
        ["does not exist on 2027-03-28", None],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        SKIP,
        "2027-03-27 12:00",
        ["2027-03-28 01:00", "2027-03-29 00:30"],
        ["skipped", None],
    ),
    (
        "30 1 * * *",
        "Europe/London",
        TWICE,
        "2027-10-30 12:00",
        ["2027-10-31 00:30", "2027-10-31 01:30", "2027-11-01 01:30"],
        ["occurs twice", "occurs twice", None],
    ),
    (
        "0 1 * * *",
        "Europe/London",
        SHIFT_ONCE,
        "2027-10-30 12:00",
        ["2027-10-31 00:00", "2027-11-01 01:00"],
        ["occurs twice on 2027-10-31", None],
    ),
    # --- Australia/Lord_Howe, fall back 2026-04-05: 02:00 (+11) -> 01:30 (+10:30), 15:00Z on 04-04
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2026-04-03 12:00",
        ["2026-04-03 14:45", "2026-04-04 14:45", "2026-04-05 15:15"],
        [None, "first (+11)", None],
    ),
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        TWICE,
        "2026-04-04 12:00",
        ["2026-04-04 14:45", "2026-04-04 15:15", "2026-04-05 15:15"],
        ["(+11, then +1030)", "occurs twice", None],
    ),
    (
        "0 1 * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2026-04-04 12:00",  # 01:00 is before the repeat
        ["2026-04-04 14:00", "2026-04-05 14:30"],
        [None, None],
    ),
    (
        "*/15 * * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2026-04-04 14:05",
        [
            "2026-04-04 14:15",
            "2026-04-04 14:30",
            "2026-04-04 14:45",
            "2026-04-04 15:00",
            "2026-04-04 15:15",
            "2026-04-04 15:30",
        ],
        [None] + ["a wildcard hour follows elapsed time"] * 4 + [None],
    ),
    # --- Australia/Lord_Howe, spring forward 2026-10-04: 02:00 (+10:30) -> 02:30 (+11), 15:30Z on 10-03
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2026-10-02 00:00",
        ["2026-10-02 15:45", "2026-10-03 15:30", "2026-10-04 15:15"],
        [None, "moved to 02:30 +11", None],
    ),
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        SKIP,
        "2026-10-03 00:00",
        ["2026-10-03 15:30", "2026-10-04 15:15"],
        ["02:15 skipped", None],
    ),
    (
        "*/15 2 * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2026-10-03 12:00",
        ["2026-10-03 15:30", "2026-10-03 15:45"],
        ["02:00, 02:15 do not exist", None],
    ),
    (
        "*/15 2 * * *",
        "Australia/Lord_Howe",
        SKIP,
        "2026-10-03 12:00",
        ["2026-10-03 15:30", "2026-10-03 15:45"],
        ["runs as usual", None],
    ),
    (
        "30 2 * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2026-10-03 12:00",
        ["2026-10-03 15:30", "2026-10-04 15:30"],
        [None, None],
    ),
    # --- Australia/Lord_Howe 2027: fall back 04-04 (15:00Z on 04-03), spring forward 10-03 (15:30Z on 10-02)
    (
        "45 1 * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2027-04-03 12:00",
        ["2027-04-03 14:45", "2027-04-04 15:15"],
        ["occurs twice on 2027-04-04", None],
    ),
    (
        "15 2 * * *",
        "Australia/Lord_Howe",
        SHIFT_ONCE,
        "2027-10-02 12:00",
        ["2027-10-02 15:30", "2027-10-03 15:15"],
        ["does not exist on 2027-10-03", None],
    ),
    # --- Asia/Tokyo (+9, no DST): nothing moves
    (
        "30 2 * * *",
        "Asia/Tokyo",
        SHIFT_ONCE,
        "2026-03-07 00:00",
        ["2026-03-07 17:30", "2026-03-08 17:30", "2026-03-09 17:30"],
        [None, None, None],
    ),
    (
        "*/15 2 * * *",
        "Asia/Tokyo",
        SKIP,
        "2026-11-01 00:00",
        ["2026-11-01 17:00", "2026-11-01 17:15", "2026-11-01 17:30"],
        [None, None, None],
    ),
]


@pytest.mark.parametrize(("expr", "tz", "dst", "after", "expected", "notes"), TRANSITION_CASES)
def test_transition_days_fire_at_the_expected_instants(
    expr: str, tz: str, dst: DstPolicy, after: str, expected: list[str], notes: list[str | None]
) -> None:
    found = fires(expr, tz, after, len(expected), dst)
    assert instants(found) == expected
    for occurrence, note in zip(found, notes):
        if note is None:
            assert occurrence.dst_note is None, occurrence
        else:
            assert occurrence.dst_note is not None and note in occurrence.dst_note, occurrence.dst_note
        # Skipped exactly when a gap was dropped and no real occurrence shares the instant.
        dropped = occurrence.dst_note is not None and occurrence.dst_note.endswith("(spring forward)")
        assert occurrence.skipped == (dropped and dst.gap == "skip")
        assert occurrence.reason == ("dst_gap" if occurrence.skipped else None)
        assert occurrence.local.astimezone(UTC) == occurrence.nominal_utc


def test_shifted_occurrence_reports_the_wall_time_it_runs_at() -> None:
    [occurrence] = fires("30 2 * * *", "America/New_York", "2026-03-08 00:00", 1)
    assert occurrence.local.strftime("%H:%M %Z") == "03:00 EDT"
    assert occurrence.dst_note == "02:30 does not exist on 2026-03-08 (spring forward); moved to 03:00 EDT"


def test_second_instance_of_a_repeated_hour_carries_fold_1() -> None:
    found = fires("*/30 * * * *", "America/New_York", "2026-11-01 05:45", 2)
    walls = [(o.local.strftime("%H:%M %Z"), o.local.fold) for o in found]
    assert walls == [("01:00 EST", 1), ("01:30 EST", 1)]


def test_skip_policy_notes_are_exact() -> None:
    [occurrence] = fires("30 2 * * *", "America/New_York", "2026-03-08 00:00", 1, SKIP)
    assert occurrence.skipped and occurrence.reason == "dst_gap"
    assert occurrence.dst_note == "02:30 skipped: does not exist on 2026-03-08 (spring forward)"
    [once] = fires("30 1 * * *", "America/New_York", "2026-11-01 00:00", 1)
    assert once.dst_note == "01:30 occurs twice on 2026-11-01 (fall back); runs once, at the first (EDT)"


def test_tokyo_fires_every_24_hours_for_two_years() -> None:
    found = fires("30 2 * * *", "Asia/Tokyo", "2026-01-01 00:00", 730)
    gaps = {b.nominal_utc - a.nominal_utc for a, b in pairwise(found)}
    assert gaps == {timedelta(hours=24)}
    assert all(o.dst_note is None and o.local.strftime("%H:%M") == "02:30" for o in found)


def test_utc_zone_per_minute_is_every_minute() -> None:
    found = fires("* * * * *", "UTC", "2026-03-29 00:00", 180)
    assert {b.nominal_utc - a.nominal_utc for a, b in pairwise(found)} == {timedelta(minutes=1)}


def test_after_is_exclusive_and_order_is_strict() -> None:
    found = fires("*/30 * * * *", "America/New_York", "2026-11-01 05:00", 3)
    assert instants(found) == ["2026-11-01 05:30", "2026-11-01 06:00", "2026-11-01 06:30"]
    # Resuming from the fold=1 copy of 01:00 must not replay 01:30 EDT (05:30Z).
    resumed = fires("*/30 * * * *", "America/New_York", "2026-11-01 06:00", 2)
    assert instants(resumed) == ["2026-11-01 06:30", "2026-11-01 07:00"]


def test_resuming_inside_a_gap_merge_does_not_repeat_it() -> None:
    found = fires("*/15 2 * * *", "America/New_York", "2026-03-08 07:00", 1)
    assert instants(found) == ["2026-03-09 06:00"]


def test_naive_after_is_refused() -> None:
    with pytest.raises(ValueError):
        occurrences_after(CronSchedule("* * * * *", "UTC"), datetime(2026, 1, 1), "k")


def test_day_of_month_and_day_of_week_are_ored_when_both_restricted() -> None:
    # 1st-3rd of the month OR Mondays (Vixie semantics), January 2026 in UTC.
    days = {o.local.day for o in fires("0 12 1-3 * MON", "UTC", "2025-12-31 23:00", 7)}
    assert days == {1, 2, 3, 5, 12, 19, 26}
    weekdays_only = fires("0 12 * * MON", "UTC", "2025-12-31 23:00", 3)
    assert [o.local.day for o in weekdays_only] == [5, 12, 19]


# ---------------------------------------------------------------------------------------------
# Jitter
# ---------------------------------------------------------------------------------------------


def test_jitter_offsets_run_at_and_never_the_nominal_sequence() -> None:
    schedule = CronSchedule("*/10 * * * *", "Europe/London", jitter_s=300)
    offset = timedelta(seconds=jitter_offset_s("job-7", 300))
    found = list(islice(occurrences_after(schedule, utc("2026-05-01 00:00"), "job-7"), 5))
    assert instants(found)[0] == "2026-05-01 00:10"
    assert {o.run_at - o.nominal_utc for o in found} == {offset}
    assert {b.nominal_utc - a.nominal_utc for a, b in pairwise(found)} == {timedelta(minutes=10)}
    again = next_occurrence(schedule, found[0].nominal_utc, "job-7")
    assert again == found[1]


def test_jitter_offset_is_stable_in_range_and_spread() -> None:
    assert jitter_offset_s("job-7", 0) == 0
    # Pinned: a different value after an upgrade would move every job's slot.
    assert jitter_offset_s("job-7", 3600) == jitter_offset_s("job-7", 3600) == 2870
    offsets = [jitter_offset_s(f"job-{n}", 60) for n in range(600)]
    assert all(0 <= o < 60 for o in offsets)
    assert len(set(offsets)) == 60
    with pytest.raises(InvalidSchedule):
        jitter_offset_s("job-7", -1)


# ---------------------------------------------------------------------------------------------
# H tokens
# ---------------------------------------------------------------------------------------------


def fields_of(expr: str, key: str) -> list[str]:
    return validate_cron(expr, key).split()


def test_h_is_stable_for_a_job_and_pinned() -> None:
    first = validate_cron("H H * * *", "job-42")
    assert validate_cron("H H * * *", "job-42") == first
    assert first == "4 1 * * *"  # pinned: hashlib, not the per-process hash()


def test_h_spreads_across_keys_and_fields() -> None:
    minutes = [int(fields_of("H * * * *", f"job-{n}")[0]) for n in range(500)]
    assert all(0 <= m <= 59 for m in minutes)
    assert len(set(minutes)) >= 55
    pairs = [tuple(map(int, fields_of("H H * * *", f"job-{n}")[:2])) for n in range(200)]
    assert sum(minute == hour for minute, hour in pairs) < 30  # independent per field


def test_an_expression_without_h_is_compiled_once_for_every_job() -> None:
    # Shared, not equal by accident: a tenant's thousand jobs on one expression parse it once.
    assert compile_cron("*/5 9-17 * * MON-FRI", "job-1") is compile_cron("*/5 9-17 * * MON-FRI", "job-2")
    assert compile_cron("0 0 * * THU", "job-1") is compile_cron("0 0 * * THU", "job-2")


def test_an_expression_with_h_is_compiled_per_job() -> None:
    first, second = compile_cron("H H * * *", "job-1"), compile_cron("H H * * *", "job-2")
    assert first is not second and first.resolved != second.resolved
    assert compile_cron("0 h(0-5) * * *", "job-1").resolved == validate_cron("0 H(0-5) * * *", "job-1")
    assert compile_cron("0,H 1 * * *", "job-3") is not compile_cron("0,H 1 * * *", "job-4")


@pytest.mark.parametrize("key", [f"job-{n}" for n in range(40)])
def test_h_values_stay_in_their_ranges(key: str) -> None:
    minute, hour, day, month, weekday = fields_of("H H H H H", key)
    assert 0 <= int(minute) <= 59 and 0 <= int(hour) <= 23
    assert 1 <= int(day) <= 28  # H in day-of-month avoids days some months lack
    assert 1 <= int(month) <= 12 and 0 <= int(weekday) <= 6
    ranged = fields_of("H(10-20) H(2-4) * * H(MON-FRI)", key)
    assert 10 <= int(ranged[0]) <= 20 and 2 <= int(ranged[1]) <= 4 and 1 <= int(ranged[4]) <= 5


def hourly_walk(minute_field: str, count: int) -> list[datetime]:
    walk = croniter(f"{minute_field} * * * *", datetime(2025, 12, 31, 23, 59))
    return [walk.get_next(datetime) for _ in range(count)]


@pytest.mark.parametrize("key", [f"job-{n}" for n in range(40)])
def test_h_with_range_and_step(key: str) -> None:
    minute = fields_of("H(0-29)/10 * * * *", key)[0]
    values = [moment.minute for moment in hourly_walk(minute, 3)]
    start = values[0]
    assert 0 <= start <= 9
    assert values == [start, start + 10, start + 20]  # three slots inside 0-29, never past it
    quarter = fields_of("H/15 * * * *", key)[0]
    slots = sorted({moment.minute for moment in hourly_walk(quarter, 8)})
    assert len(slots) == 4 and slots[0] < 15 and {b - a for a, b in pairwise(slots)} == {15}


def test_h_step_wider_than_its_range_is_one_value() -> None:
    value = fields_of("H(50-55)/15 * * * *", "job-1")[0]
    assert value.isdigit() and 50 <= int(value) <= 55


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------

VALID = [
    ("*/15 * * * *", "*/15 * * * *"),
    ("0 9 * * MON-FRI", "0 9 * * 1-5"),
    ("0 9 * * mon-fri", "0 9 * * 1-5"),
    ("0 0 1 jan,Jul *", "0 0 1 1,7 *"),
    ("  0   9 * *  *  ", "0 9 * * *"),
    ("0 0 * * 7", "0 0 * * 0"),
    ("0 0 * * FRI-SUN", "0 0 * * 0,5-6"),
    ("0 1-1 * * *", "0 1 * * *"),  # croniter would read the range "1-1" as every hour
    ("59/15 * * * *", "59 * * * *"),
    ("5/20 * * * *", "5-59/20 * * * *"),
    ("0 0 ? * 1", "0 0 * * 1"),
    ("0 0 */10 * *", "0 0 1,11,21,31 * *"),
    ("0 0 29 2 *", "0 0 29 2 *"),  # leap days exist
    ("@hourly", "0 * * * *"),
    ("@daily", "0 0 * * *"),
    ("@weekly", "0 0 * * 0"),
    ("@monthly", "0 0 1 * *"),
    ("@YEARLY", "0 0 1 1 *"),
]


@pytest.mark.parametrize(("expr", "resolved"), VALID)
def test_valid_expressions_resolve(expr: str, resolved: str) -> None:
    assert validate_cron(expr, "k") == resolved
    assert validate_cron(resolved, "other") == resolved  # resolving is idempotent
    croniter(resolved)  # and croniter reads the result


BAD_CRON = [
    ("", "empty"),
    ("* * * *", "expected 5 fields"),
    ("0 * * * * *", "seconds and year fields are not supported"),
    ("0 0 12 * * ? 2026", "got 7"),
    ("@reboot", "@reboot is not supported"),
    ("@fortnightly", "unknown shorthand"),
    ("60 * * * *", "60 is out of range 0-59"),
    ("* 24 * * *", "hour field: 24 is out of range 0-23"),
    ("* * 0 * *", "day-of-month field: 0 is out of range 1-31"),
    ("* * * 13 *", "month field: 13 is out of range 1-12"),
    ("* * * * 8", "day-of-week field: 8 is out of range 0-7"),
    ("*/0 * * * *", "step must be at least 1"),
    ("*/61 * * * *", "larger than the field's span"),
    ("30-10 * * * *", "runs backwards"),
    ("* * * FOO *", "unknown name 'FOO'"),
    ("MON * * * *", "names are only allowed in month and day-of-week"),
    ("0 0 L * *", "not supported"),
    ("0 0 * * 5#3", "not supported"),
    ("0 0 30 2 *", "never occurs"),
    ("0 0 31 4,6 *", "never occurs"),
    ("1,,2 * * * *", "empty list item"),
    ("? * * * *", "only allowed in day-of-month and day-of-week"),
    ("H(30-10) * * * *", "runs backwards"),
    ("H(0-60) * * * *", "out of range"),
    ("every day at 9", "expected 5 fields"),
    ("a b c d e", "is not a number"),
    ("0 0 * * 1-", "is not a value, range, step, name or H token"),
    ("1.5 * * * *", "is not a value, range, step, name or H token"),
    ("-5 * * * *", "is not a value, range, step, name or H token"),
]


@pytest.mark.parametrize(("expr", "detail"), BAD_CRON)
def test_bad_expressions_name_the_problem(expr: str, detail: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        validate_cron(expr, "k")
    assert caught.value.field == "schedule.cron"
    assert detail in caught.value.detail, caught.value.detail


BAD_TZ = [
    ("", "is empty"),
    ("   ", "is empty"),
    ("Mars/Olympus_Mons", "unknown time zone 'Mars/Olympus_Mons'"),
    ("america/new_york", "did you mean 'America/New_York'?"),
    ("/etc/localtime", "file path"),
    ("../../etc/passwd", "file path"),
    ("localtime", "server's own zone"),
    ("posixrules", "unknown time zone"),
    ("EST+5", "unknown time zone"),
]


@pytest.mark.parametrize(("tz", "detail"), BAD_TZ)
def test_bad_zones_name_the_problem(tz: str, detail: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        validate_tz(tz)
    assert caught.value.field == "schedule.tz"
    assert detail in caught.value.detail, caught.value.detail


@pytest.mark.parametrize(
    "tz",
    [
        "UTC",
        "Etc/UTC",
        "Etc/GMT",
        "Etc/GMT+0",
        "GMT",
        "Asia/Tokyo",
        "America/New_York",
        "Australia/Lord_Howe",
        "America/Panama",
        "Pacific/Honolulu",
    ],
)
def test_good_zones_load(tz: str) -> None:
    assert validate_tz(tz).key == tz


LEGACY_TZ = [
    ("EST", "America/New_York"),
    ("est", "America/New_York"),
    ("MST", "America/Phoenix"),
    ("HST", "Pacific/Honolulu"),
    ("EST5EDT", "America/New_York"),
    ("CST6CDT", "America/Chicago"),
    ("MST7MDT", "America/Denver"),
    ("PST8PDT", "America/Los_Angeles"),
    ("Etc/GMT+5", "UTC-05:00 all year"),
    ("Etc/GMT-14", "UTC+14:00 all year"),
]


@pytest.mark.parametrize(("tz", "suggested"), LEGACY_TZ)
def test_legacy_names_that_are_not_places_are_refused_with_the_zone_to_name(tz: str, suggested: str) -> None:
    with pytest.raises(InvalidSchedule) as caught:
        validate_tz(tz)
    assert caught.value.field == "schedule.tz"
    assert suggested in caught.value.detail, caught.value.detail


def test_a_stored_schedule_in_a_legacy_zone_still_evaluates() -> None:
    """Jobs accepted before legacy names were refused keep firing: only new schedules are checked."""
    [occurrence] = fires("0 9 * * *", "EST", "2026-07-01 00:00", 1)
    assert instants([occurrence]) == ["2026-07-01 14:00"]  # 09:00 at UTC-05:00, no EDT


def test_occurrences_after_validates_eagerly() -> None:
    with pytest.raises(InvalidSchedule):
        occurrences_after(CronSchedule("61 * * * *", "UTC"), utc("2026-01-01 00:00"), "k")
    with pytest.raises(InvalidSchedule):
        occurrences_after(CronSchedule("* * * * *", "Nowhere/Town"), utc("2026-01-01 00:00"), "k")


def test_policy_values_are_checked() -> None:
    with pytest.raises(InvalidSchedule):
        DstPolicy(gap="later")  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule):
        DstPolicy(repeat="thrice")  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule):
        CronSchedule("* * * * *", "UTC", jitter_s=-1)


# ---------------------------------------------------------------------------------------------
# next_occurrence and preview
# ---------------------------------------------------------------------------------------------


def test_next_occurrence_passes_over_skipped_ones() -> None:
    schedule = CronSchedule("30 2 * * *", "America/New_York", dst=SKIP)
    assert next_occurrence(schedule, utc("2026-03-07 07:30"), "k").nominal_utc == utc("2026-03-09 06:30")


def test_preview_lists_skipped_ones_marked() -> None:
    schedule = CronSchedule("30 2 * * *", "America/New_York", dst=SKIP)
    listed = preview(schedule, utc("2026-03-06 12:00"), 4)
    expected = ["2026-03-07 07:30", "2026-03-08 07:00", "2026-03-09 06:30", "2026-03-10 06:30"]
    assert instants(listed) == expected
    assert [o.skipped for o in listed] == [False, True, False, False]
    assert preview(schedule, utc("2026-03-06 12:00"), 0) == []


def test_preview_uses_the_preview_key_for_h() -> None:
    schedule = CronSchedule("H * * * *", "UTC")
    minute = int(validate_cron("H * * * *", "preview").split()[0])
    assert preview(schedule, utc("2026-01-01 00:00"), 1)[0].nominal_utc.minute == minute


# ---------------------------------------------------------------------------------------------
# Missed occurrences and misfire plans
# ---------------------------------------------------------------------------------------------


def brute_missed(schedule: CronSchedule, last: datetime, now: datetime) -> list[Occurrence]:
    within = takewhile(lambda o: o.nominal_utc <= now, occurrences_after(schedule, last, "k"))
    return [o for o in within if not o.skipped]


def test_missed_bounds_are_exclusive_then_inclusive() -> None:
    schedule = CronSchedule("0 * * * *", "UTC")
    missed, total = missed_occurrences(schedule, utc("2026-01-01 10:00"), utc("2026-01-01 15:00"), "k")
    assert instants(missed) == [f"2026-01-01 {h}:00" for h in (11, 12, 13, 14, 15)]
    assert total == 5


def test_missed_nothing_when_now_is_not_after_last() -> None:
    schedule = CronSchedule("* * * * *", "UTC")
    assert missed_occurrences(schedule, utc("2026-01-01 10:00"), utc("2026-01-01 10:00"), "k") == ([], 0)
    assert missed_occurrences(schedule, utc("2026-01-01 10:00"), utc("2026-01-01 09:00"), "k") == ([], 0)


def test_missed_cap_keeps_the_newest() -> None:
    schedule = CronSchedule("* * * * *", "UTC")
    last, now = utc("2026-01-01 00:00"), utc("2026-01-02 00:00")
    missed, total = missed_occurrences(schedule, last, now, "k", cap=100)
    assert total == 1440
    assert len(missed) == 100
    assert missed[-1].nominal_utc == utc("2026-01-02 00:00")
    assert missed[0].nominal_utc == utc("2026-01-01 22:21")
    assert missed_occurrences(schedule, last, now, "k", cap=0) == ([], 1440)


def test_missed_year_of_per_minute_job_is_fast_and_exact() -> None:
    schedule = CronSchedule("* * * * *", "America/New_York")
    started = time.perf_counter()
    missed, total = missed_occurrences(schedule, utc("2026-01-01 00:00"), utc("2027-01-01 00:00"), "k")
    elapsed = time.perf_counter() - started
    # A wildcard-hour per-minute job fires once per real minute, DST or not.
    assert total == 365 * 24 * 60
    assert instants(missed[-2:]) == ["2026-12-31 23:59", "2027-01-01 00:00"]
    assert len(missed) == 100
    assert elapsed < 2.0, f"took {elapsed:.2f}s"


def test_missed_year_of_fixed_time_job_counts_dst_days_correctly() -> None:
    # 02:30 New York daily for 2026: 365 days, the 03-08 one shifted (runs) or skipped (not counted).
    shifted = CronSchedule("30 2 * * *", "America/New_York")
    skipped = CronSchedule("30 2 * * *", "America/New_York", dst=SKIP)
    last, now = utc("2026-01-01 00:00"), utc("2027-01-01 00:00")
    assert missed_occurrences(shifted, last, now, "k")[1] == 365
    assert missed_occurrences(skipped, last, now, "k")[1] == 364
    twice = CronSchedule("30 1 * * *", "America/New_York", dst=TWICE)
    assert missed_occurrences(twice, last, now, "k")[1] == 366


@pytest.mark.parametrize("expr", ["*/7 * * * *", "*/15 2 * * *", "30 1 * * *", "0,30 0-3 * * 0", "H/5 H * * *"])
@pytest.mark.parametrize("tz", ["America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Tokyo"])
@pytest.mark.parametrize("dst", [SHIFT_ONCE, DstPolicy(gap="skip", repeat="twice")])
def test_missed_matches_listing_everything(expr: str, tz: str, dst: DstPolicy) -> None:
    schedule = CronSchedule(validate_cron(expr, "k"), tz, dst=dst)
    windows = [
        ("2026-03-07 10:07", "2026-03-09 00:00"),
        ("2026-03-28 00:00", "2026-04-06 00:00"),
        ("2026-10-03 00:00", "2026-10-05 00:00"),
        ("2026-10-24 00:00", "2026-11-02 12:00"),
    ]
    for last, now in windows:
        everything = brute_missed(schedule, utc(last), utc(now))
        missed, total = missed_occurrences(schedule, utc(last), utc(now), "k", cap=30)
        assert total == len(everything)
        assert missed == everything[-30:]


def occurrence(minute: int) -> Occurrence:
    at = utc("2026-01-01 00:00") + timedelta(minutes=minute)
    return Occurrence(nominal_utc=at, run_at=at, local=at, skipped=False, dst_note=None, reason=None)


MISSED = [occurrence(m) for m in range(5)]


def test_plan_run_once_runs_only_the_newest() -> None:
    plan = plan_misfire("run_once", MISSED, total_missed=250)
    assert plan == MisfirePlan(run=[MISSED[-1]], skipped_count=249, newest_skipped=MISSED[-2])


def test_plan_catch_up_runs_the_newest_cap_in_order() -> None:
    assert plan_misfire("catch_up", MISSED, total_missed=5) == MisfirePlan(MISSED, 0, None)
    capped = plan_misfire("catch_up", MISSED, total_missed=250, cap=3)
    assert capped == MisfirePlan(run=MISSED[2:], skipped_count=247, newest_skipped=MISSED[1])


def test_plan_skip_runs_nothing() -> None:
    assert plan_misfire("skip", MISSED, total_missed=7) == MisfirePlan([], 7, MISSED[-1])


def test_plan_with_nothing_missed() -> None:
    for policy in ("run_once", "catch_up", "skip"):
        assert plan_misfire(policy, [], 0) == MisfirePlan([], 0, None)  # type: ignore[arg-type]


def test_plan_refuses_inconsistent_input() -> None:
    with pytest.raises(ValueError):
        plan_misfire("run_once", MISSED, total_missed=2)
    with pytest.raises(ValueError):
        plan_misfire("later", MISSED, total_missed=5)  # type: ignore[arg-type]


def test_missed_then_plan_end_to_end() -> None:
    schedule = CronSchedule("*/10 * * * *", "Europe/London")
    missed, total = missed_occurrences(schedule, utc("2026-06-01 00:00"), utc("2026-06-03 00:00"), "k")
    assert total == 288 and len(missed) == 100
    plan = plan_misfire("catch_up", missed, total)
    assert len(plan.run) == 100 and plan.skipped_count == 188
    assert plan.run[-1].nominal_utc == utc("2026-06-03 00:00")
