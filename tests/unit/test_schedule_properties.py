"""Properties of cron schedules over every UTC-offset change in the tz database, 2026-2030.

Transitions are found independently of the module under test: every zone's UTC offset is
sampled weekly (no zone changes offset twice within a week in these years) and each change is
bisected to the second. Hypothesis then samples transitions, expressions and policies; one plain
test also walks every distinct transition with two fixed expressions.
"""

from __future__ import annotations

import functools
import zoneinfo
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta, timezone
from itertools import islice, pairwise, takewhile
from zoneinfo import ZoneInfo

import pytest
from croniter import croniter
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.schedule import (
    CronSchedule,
    DstPolicy,
    Occurrence,
    jitter_offset_s,
    missed_occurrences,
    occurrences_after,
    validate_cron,
)

UTC = timezone.utc
# database=None: no .hypothesis directory written by unit tests; deadline=None: the first call
# per zone loads tz data.
PROPERTY = settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class Transition:
    zone_name: str
    instant: datetime  # first instant with the new offset (UTC)
    before: timedelta
    after: timedelta

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.zone_name)

    @property
    def is_gap(self) -> bool:
        return self.after > self.before

    @property
    def size(self) -> timedelta:
        return abs(self.after - self.before)

    @property
    def affected_walls(self) -> tuple[datetime, datetime]:
        """[start, end) of the wall times that do not exist (gap) or occur twice (repeat)."""
        a = (self.instant + self.before).replace(tzinfo=None)
        b = (self.instant + self.after).replace(tzinfo=None)
        return (min(a, b), max(a, b))


def _offset(zone: ZoneInfo, ts: int) -> timedelta | None:
    return datetime.fromtimestamp(ts, zone).utcoffset()


@functools.cache
def all_transitions() -> tuple[Transition, ...]:
    names = sorted(zoneinfo.available_timezones() - {"localtime", "posixrules", "Factory"})
    start = int(datetime(2026, 1, 1, tzinfo=UTC).timestamp())
    stop = int(datetime(2031, 1, 1, tzinfo=UTC).timestamp())
    week = 7 * 86400
    found = []
    for name in names:
        zone = ZoneInfo(name)
        previous = _offset(zone, start)
        for probe in range(start + week, stop + week, week):
            current = _offset(zone, probe)
            if current == previous:
                continue
            lo, hi = probe - week, probe
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if _offset(zone, mid) == previous:
                    lo = mid
                else:
                    hi = mid
            assert previous is not None and current is not None
            if hi < stop:
                found.append(Transition(name, datetime.fromtimestamp(hi, UTC), previous, current))
            previous = current
    return tuple(found)


@functools.cache
def distinct_transitions() -> tuple[Transition, ...]:
    """One zone per (instant, offsets): aliases and neighbours that share a change behave alike."""
    seen: dict[tuple[datetime, timedelta, timedelta], Transition] = {}
    for t in all_transitions():
        seen.setdefault((t.instant, t.before, t.after), t)
    return tuple(seen.values())


def test_transition_table_is_plausible() -> None:
    transitions = all_transitions()
    zones = {t.zone_name for t in transitions}
    assert {"America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Nuuk"} <= zones
    assert "Asia/Tokyo" not in zones and "UTC" not in zones
    lord_howe = [t.instant for t in transitions if t.zone_name == "Australia/Lord_Howe"]
    assert datetime(2026, 4, 4, 15, 0, tzinfo=UTC) in lord_howe
    assert datetime(2026, 10, 3, 15, 30, tzinfo=UTC) in lord_howe
    assert len(transitions) > 1000


transitions = st.sampled_from(all_transitions())
policies = st.builds(DstPolicy, gap=st.sampled_from(["shift", "skip"]), repeat=st.sampled_from(["once", "twice"]))


@st.composite
def expressions(draw: st.DrawFn, transition: Transition) -> str:
    """Expressions that land on or near the transition's wall times, fixed and wildcard hours."""
    start, _ = transition.affected_walls
    near_hour = (start.hour + draw(st.integers(-1, 1))) % 24
    minute = draw(
        st.sampled_from(["*/15", "*/30", "*/7", "0", "30", "45", str(start.minute), "H", "H/20"])
        | st.integers(0, 59).map(str)
    )
    hour = draw(
        st.sampled_from(["*", "*/2", str(near_hour), f"{near_hour},{(near_hour + 1) % 24}", "H"])
        | st.integers(0, 23).map(str)
    )
    weekday = draw(st.sampled_from(["*", "*", "*", "1-5", "0,6"]))
    return f"{minute} {hour} * * {weekday}"


def window(schedule: CronSchedule, transition: Transition, job_key: str, hours: int) -> list[Occurrence]:
    start = transition.instant - timedelta(hours=hours)
    end = transition.instant + timedelta(hours=hours)
    return list(takewhile(lambda o: o.nominal_utc <= end, occurrences_after(schedule, start, job_key)))


def wall_of(instant: datetime, zone: ZoneInfo) -> datetime:
    return instant.astimezone(zone).replace(tzinfo=None)


def is_transition_instant(instant: datetime, zone: ZoneInfo) -> bool:
    just_before = (instant - timedelta(seconds=1)).astimezone(zone)
    return just_before.utcoffset() != instant.astimezone(zone).utcoffset()


def check_well_formed(found: list[Occurrence], schedule: CronSchedule, job_key: str, resolved: str) -> None:
    zone = ZoneInfo(schedule.tz)
    jitter = timedelta(seconds=jitter_offset_s(job_key, schedule.jitter_s))
    for earlier, later in pairwise(found):
        assert earlier.nominal_utc < later.nominal_utc, (earlier, later)
    for occ in found:
        assert occ.nominal_utc.utcoffset() == timedelta(0)
        assert occ.run_at - occ.nominal_utc == jitter
        # The local wall time is real: it round-trips to the same instant with its fold.
        assert occ.local.tzinfo is zone or getattr(occ.local.tzinfo, "key", None) == schedule.tz
        assert occ.local.astimezone(UTC) == occ.nominal_utc
        wall = occ.local.replace(tzinfo=None)
        assert wall.replace(tzinfo=zone, fold=occ.local.fold).astimezone(UTC) == occ.nominal_utc
        assert wall_of(occ.nominal_utc, zone) == wall
        assert occ.skipped == (occ.reason == "dst_gap")
        if occ.skipped:
            assert schedule.dst.gap == "skip"
        if croniter.match(resolved, wall):
            continue
        # Not a match of the fields: only a gap occurrence, sitting at the transition instant.
        assert occ.dst_note is not None and "not exist" in occ.dst_note, occ
        assert is_transition_instant(occ.nominal_utc, zone), occ


def matching_walls(resolved: str, first: datetime, last: datetime) -> set[datetime]:
    """Wall times in (first, last] that croniter says match: the oracle for the fields."""
    walk = croniter(resolved, first)
    return set(takewhile(lambda wall: wall <= last, iter(lambda: walk.get_next(datetime), None)))


def expected_real_instants(
    resolved: str, zone: ZoneInfo, start: datetime, end: datetime, schedule_repeat: str
) -> set[datetime]:
    """Every whole minute in (start, end] whose wall time matches, minus suppressed second copies.

    A second copy is suppressed only for a fixed hour field under repeat="once".
    """
    wildcard_hour = resolved.split()[1].startswith("*")
    margin = timedelta(hours=3)
    walls = matching_walls(resolved, wall_of(start, zone) - margin, wall_of(end, zone) + margin)
    expected = set()
    minute = start.replace(second=0, microsecond=0) + timedelta(minutes=1)
    while minute <= end:
        local = minute.astimezone(zone)
        if local.replace(tzinfo=None) in walls:
            second_copy = local.fold == 1 and local.replace(fold=0).astimezone(UTC) != minute
            if not second_copy or wildcard_hour or schedule_repeat == "twice":
                expected.add(minute)
        minute += timedelta(minutes=1)
    return expected


@PROPERTY
@given(
    data=st.data(),
    transition=transitions,
    dst=policies,
    job_key=st.sampled_from(["a", "b", "job-9"]),
    jitter_s=st.sampled_from([0, 0, 45, 3600]),
)
def test_occurrences_around_any_transition_are_sound_and_complete(
    data: st.DataObject, transition: Transition, dst: DstPolicy, job_key: str, jitter_s: int
) -> None:
    expr = data.draw(expressions(transition))
    resolved = validate_cron(expr, job_key)
    schedule = CronSchedule(expr, transition.zone_name, jitter_s=jitter_s, dst=dst)
    hours = 4
    found = window(schedule, transition, job_key, hours)
    check_well_formed(found, schedule, job_key, resolved)

    zone = transition.zone
    start, end = transition.instant - timedelta(hours=hours), transition.instant + timedelta(hours=hours)
    real = {o.nominal_utc for o in found if croniter.match(resolved, o.local.replace(tzinfo=None))}
    assert real == expected_real_instants(resolved, zone, start, end, dst.repeat)
    # A wall time that falls in the gap shows up at the transition instant (run or skipped).
    gap_start, gap_end = transition.affected_walls
    if transition.is_gap:
        hit = any(
            gap_start <= wall < gap_end for wall in matching_walls(resolved, gap_start - timedelta(minutes=1), gap_end)
        )
        at_transition = [o for o in found if o.nominal_utc == transition.instant]
        assert bool(at_transition) == (hit or transition.instant in real)
        if hit:
            assert at_transition[0].dst_note is not None
            if dst.gap == "shift":
                assert not at_transition[0].skipped


@PROPERTY
@given(
    transition=transitions,
    minute=st.integers(0, 59),
    hour_offset=st.integers(-2, 2),
    gap=st.sampled_from(["shift", "skip"]),
)
def test_fixed_time_fires_once_per_local_date_under_repeat_once(
    transition: Transition, minute: int, hour_offset: int, gap: str
) -> None:
    start, end = transition.affected_walls
    # Bias the hour towards the affected wall times, where the rules matter.
    hour = (start.hour + hour_offset) % 24
    policy = DstPolicy(gap=gap, repeat="once")  # type: ignore[arg-type]
    schedule = CronSchedule(f"{minute} {hour} * * *", transition.zone_name, dst=policy)
    zone = transition.zone
    found = window(schedule, transition, "k", hours=72)
    check_well_formed(found, schedule, "k", f"{minute} {hour} * * *")

    def cron_date(occ: Occurrence) -> date:
        wall = occ.local.replace(tzinfo=None)
        if wall.time() == time(hour, minute):
            return wall.date()
        # Shifted out of a gap: it belongs to the date whose hour:minute fell in the gap, which
        # for a gap that crosses midnight (America/Nuuk, 23:00 -> 00:00) is the day before.
        candidate = datetime.combine(start.date(), time(hour, minute))
        if candidate < start:
            candidate += timedelta(days=1)
        assert start <= candidate < end and transition.is_gap
        return candidate.date()

    dates = [cron_date(o) for o in found]
    assert len(dates) == len(set(dates)), [(o.nominal_utc, o.local, o.dst_note) for o in found]
    # Every local date strictly inside the window has one occurrence (run or recorded as skipped).
    first = (transition.instant - timedelta(hours=70)).astimezone(zone).date()
    last = (transition.instant + timedelta(hours=70)).astimezone(zone).date()
    inner = {first + timedelta(days=n) for n in range(1, (last - first).days)}
    assert inner <= set(dates)
    # And real time between consecutive runs never shrinks below a day less the clock change.
    runs = [o.nominal_utc for o in found if not o.skipped]
    for a, b in pairwise(runs):
        assert b - a >= timedelta(hours=24) - transition.size


@PROPERTY
@given(
    data=st.data(),
    transition=transitions,
    dst=policies,
    before_h=st.integers(0, 30),
    after_h=st.integers(0, 30),
    cap=st.integers(0, 40),
)
def test_missed_count_matches_listing_around_any_transition(
    data: st.DataObject, transition: Transition, dst: DstPolicy, before_h: int, after_h: int, cap: int
) -> None:
    expr = data.draw(expressions(transition))
    schedule = CronSchedule(expr, transition.zone_name, dst=dst)
    last = transition.instant - timedelta(hours=before_h, minutes=data.draw(st.integers(0, 59)))
    now = transition.instant + timedelta(hours=after_h, seconds=data.draw(st.integers(0, 3599)))
    listed = [
        o for o in takewhile(lambda o: o.nominal_utc <= now, occurrences_after(schedule, last, "k")) if not o.skipped
    ]
    missed, total = missed_occurrences(schedule, last, now, "k", cap=cap)
    assert total == len(listed)
    assert missed == (listed[-cap:] if cap else [])


field_items = {
    "minute": st.sampled_from(
        ["*", "*/5", "*/13", "0", "7", "59", "10-20", "10-20/3", "5/20", "H", "H/15", "H(0-29)/10"]
    ),
    "hour": st.sampled_from(["*", "*/3", "0", "1", "2", "23", "1-3", "22/1", "H", "H(0-5)"]),
    "day": st.sampled_from(["*", "?", "1", "15", "31", "1-7", "*/10", "H", "29-31"]),
    "month": st.sampled_from(["*", "1", "FEB", "mar-may", "*/4", "H", "11,12"]),
    "weekday": st.sampled_from(["*", "?", "0", "7", "MON-FRI", "sat,sun", "*/2", "FRI-SUN", "H", "1-5/2"]),
}


@st.composite
def any_expression(draw: st.DrawFn) -> str:
    parts = [",".join(draw(st.lists(items, min_size=1, max_size=2))) for items in field_items.values()]
    return " ".join(parts)


@PROPERTY
@given(expr=any_expression(), key=st.text(min_size=1, max_size=8))
def test_resolving_is_idempotent_and_agrees_with_counting(expr: str, key: str) -> None:
    from app.errors import InvalidSchedule

    try:
        resolved = validate_cron(expr, key)
    except InvalidSchedule as refused:
        assert "never occurs" in refused.detail  # the only way these items can be invalid
        return
    assert validate_cron(resolved, "someone-else") == resolved
    # croniter's walk of the resolved form (listing) and our own field sets (counting) agree.
    schedule = CronSchedule(expr, "UTC")
    last, now = datetime(2026, 2, 25, 13, 5, tzinfo=UTC), datetime(2026, 3, 3, tzinfo=UTC)
    walk = islice(occurrences_after(schedule, last, key), 1500)
    listed = list(takewhile(lambda o: o.nominal_utc <= now, walk))
    if len(listed) < 1500:
        assert missed_occurrences(schedule, last, now, key, cap=3)[1] == len(listed)


@pytest.mark.parametrize("gap", ["shift", "skip"])
def test_every_transition_with_wildcard_and_fixed_expressions(gap: str) -> None:
    """Not sampled: every distinct transition of 2026-2030, two expressions each."""
    for transition in distinct_transitions():
        zone = transition.zone
        start, end = transition.affected_walls
        wildcard = CronSchedule("*/30 * * * *", transition.zone_name, dst=DstPolicy(gap=gap))
        found = window(wildcard, transition, "k", hours=3)
        check_well_formed(found, wildcard, "k", "*/30 * * * *")
        # Wildcard hours follow real time: half-hourly in UTC throughout, whatever the clocks do,
        # as long as the offsets are whole half hours.
        half_hour = timedelta(minutes=30)
        if transition.before % half_hour == timedelta(0) == transition.after % half_hour:
            steps = {b.nominal_utc - a.nominal_utc for a, b in pairwise(found)}
            assert steps == {timedelta(minutes=30)}, transition

        # A fixed time at the first affected wall time: shifted/skipped into the transition
        # instant in a gap, run once at the first instance in a repeat.
        fixed_expr = f"{start.minute} {start.hour} * * *"
        fixed = CronSchedule(fixed_expr, transition.zone_name, dst=DstPolicy(gap=gap))
        found = window(fixed, transition, "k", hours=30)
        check_well_formed(found, fixed, "k", fixed_expr)
        affected = [o for o in found if o.dst_note is not None]
        assert len(affected) == 1, (transition, found)
        [occ] = affected
        if transition.is_gap:
            assert occ.nominal_utc == transition.instant
            assert occ.skipped == (gap == "skip")
            assert wall_of(occ.nominal_utc, zone) == end
        else:
            assert occ.nominal_utc == transition.instant - transition.size
            assert not occ.skipped and "occurs twice" in occ.dst_note
