"""Interval schedules (``every``): fixed elapsed time, or whole days on a zone's wall clock.

Without a zone an interval is elapsed time from its anchor, as EventBridge's ``rate()`` and Temporal's
interval specs are: occurrences at ``anchor + k * every`` in UTC, and no DST rule applies.

With a zone (``{"every": "1d", "tz": "Europe/London"}``) the interval must be a whole number of days,
and occurrence ``k`` is the anchor's local wall-clock time ``k * days`` calendar days later, placed on
the UTC time line by the cron rules (:mod:`.zone`): a wall time in a spring-forward gap runs once at
the transition instant (``gap="shift"``) or is recorded as skipped (``gap="skip"``); one that a
fall-back repeats runs at its first instance (``repeat="once"``) or at both (``repeat="twice"``).
Hours, minutes and seconds stay elapsed time: "every 6 hours" means 6 real hours whatever the clock
says, and a zone would only make it ambiguous (two 6-hour steps in a 25-hour day), so a zone with
such an interval is refused.

Occurrence 0 is the anchor itself, whichever fold of a repeated hour it lies in.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from app.domain.schedule.timeline import Occurrence
from app.domain.schedule.zone import DstPolicy, as_utc, gap_end, load_zone, place

DAY_S = 86400


def _hhmm(moment: datetime) -> str:
    return moment.strftime("%H:%M")


def wall_day_occurrences(anchor: datetime, days: int, tz: str, dst: DstPolicy, after: datetime) -> Iterator[Occurrence]:
    """Occurrences of "every ``days`` days at the anchor's wall-clock time in ``tz``" with nominal_utc
    strictly after ``after``, strictly increasing, forever; gap-skipped ones included (marked).

    ``run_at`` is the nominal instant (callers add a job's jitter)."""
    if days < 1:
        raise ValueError("days must be at least 1")
    zone = load_zone(tz)
    anchor, after = as_utc(anchor, "anchor"), as_utc(after, "after")
    wall0 = anchor.astimezone(zone).replace(tzinfo=None)
    step = timedelta(days=days)
    # A wall-clock reading is never more than a day off the instant's, so one step back is enough.
    k = 0 if after < anchor else max(0, (after.astimezone(zone).replace(tzinfo=None) - wall0) // step - 1)
    while True:
        found = [(anchor, False, None)] if k == 0 else _placed(wall0 + k * step, zone, dst)
        for nominal, skipped, note in found:
            if nominal > after:
                yield Occurrence(
                    nominal, nominal, nominal.astimezone(zone), skipped, note, "dst_gap" if skipped else None
                )
        k += 1


def _placed(wall: datetime, zone: ZoneInfo, dst: DstPolicy) -> list[tuple[datetime, bool, str | None]]:
    """(nominal, skipped, note) of the wall time ``wall`` by the cron rules for a fixed hour."""
    placement = place(wall, zone)
    if placement.kind == "single":
        return [(placement.first, False, None)]
    day = wall.date().isoformat()
    if placement.kind == "repeat":
        first_name = placement.first.astimezone(zone).tzname()
        second_name = placement.second.astimezone(zone).tzname()
        head = f"{_hhmm(wall)} occurs twice on {day} (fall back)"
        if dst.repeat == "twice":
            note = f"{head}; runs at both ({first_name}, then {second_name})"
            return [(placement.first, False, note), (placement.second, False, note)]
        return [(placement.first, False, f"{head}; runs once, at the first ({first_name})")]
    moved = gap_end(zone, placement)
    missing = f"does not exist on {day} (spring forward)"
    if dst.gap == "skip":
        return [(moved, True, f"{_hhmm(wall)} skipped: {missing}")]
    local = moved.astimezone(zone)
    return [(moved, False, f"{_hhmm(wall)} {missing}; moved to {_hhmm(local)} {local.tzname()}")]
