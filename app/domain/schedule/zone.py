"""Zone placement: a local wall time on the UTC time line, by our own DST rules.

A wall time read in an IANA zone is one of three kinds (PEP 495's fold tells them apart):

* *single*: it exists once and fires at its one instant;
* *repeat*: fall back shows it twice; the schedule's :class:`DstPolicy` and the hour field decide
  which instances fire (see :mod:`app.domain.schedule.timeline`);
* *gap*: spring forward skips it; it belongs to the transition instant, the first valid instant
  after the gap, where ``gap="shift"`` runs it and ``gap="skip"`` records it as skipped.

Offset changes are also what :func:`unsettled_windows` finds, so that misfire counting can do
arithmetic wherever the offset is constant.
"""

from __future__ import annotations

import functools
import re
import zoneinfo
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal
from zoneinfo import ZoneInfo

from app.errors import InvalidSchedule

UTC = timezone.utc
TZ_FIELD = "schedule.tz"
# The longest IANA name is 32 characters (America/Argentina/ComodRivadavia); this leaves room.
MAX_TZ_LENGTH = 64


@dataclass(frozen=True)
class DstPolicy:
    """What a schedule does when a DST change removes or repeats its wall-clock time."""

    # Spring forward: "shift" runs once at the first valid instant after the gap; "skip" does not
    # run (the occurrence is yielded as skipped so it can be recorded as "skipped: dst_gap").
    gap: Literal["shift", "skip"] = "shift"
    # Fall back, fixed-hour expressions only: "once" runs at the first instance, "twice" at both.
    repeat: Literal["once", "twice"] = "once"

    def __post_init__(self) -> None:
        if self.gap not in ("shift", "skip"):
            raise InvalidSchedule("schedule.dst.gap", "must be 'shift' or 'skip'")
        if self.repeat not in ("once", "twice"):
            raise InvalidSchedule("schedule.dst.repeat", "must be 'once' or 'twice'")


# Names zoneinfo can load that are not portable zones: the server's own zone, tzdata internals.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})

# Legacy names that are not the zone of any place, and the zone to name instead. The IANA database
# keeps them for old systems only: EST, MST and HST are fixed offsets (standard time all year), and
# EST5EDT, CST6CDT, MST7MDT and PST8PDT apply the US rules to all of history (its "northamerica"
# notes). Since 2024b its "backward" file makes them links (EST to America/Panama, EST5EDT to
# America/New_York, ...), but tzdata built with "backzone", as Debian's is, keeps the old
# definitions, so the same name means different clocks on different hosts. A schedule written in
# one fires at the time its author meant only until the two disagree: every summer, for EST.
_LEGACY_ZONES: dict[str, str] = {
    "EST": "UTC-05:00 all year, never EDT; name America/New_York for US Eastern time, "
    "or America/Panama for UTC-05:00 all year",
    "MST": "UTC-07:00 all year, never MDT; name America/Denver for US Mountain time, "
    "or America/Phoenix for UTC-07:00 all year",
    "HST": "UTC-10:00 all year; name Pacific/Honolulu",
    "EST5EDT": "US Eastern rules without local history; name America/New_York",
    "CST6CDT": "US Central rules without local history; name America/Chicago",
    "MST7MDT": "US Mountain rules without local history; name America/Denver",
    "PST8PDT": "US Pacific rules without local history; name America/Los_Angeles",
}
# Etc/GMT+5 and the like: fixed offsets with POSIX's sign (Etc/GMT+5 is UTC-05:00). The IANA
# "etcetera" notes say not to use them for geographic locations. Etc/GMT+0 and friends are UTC.
_FIXED_OFFSET = re.compile(r"^Etc/GMT([+-])(\d{1,2})$")


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - _NOT_ZONES


def _legacy_reason(name: str) -> str | None:
    """Why a loadable name is refused for new schedules (None: it is a real zone, or UTC)."""
    if name in _LEGACY_ZONES:
        return f"'{name}' is a legacy name, not a place: {_LEGACY_ZONES[name]}"
    fixed = _FIXED_OFFSET.match(name)
    if fixed and int(fixed[2]) != 0:
        sign = "-" if fixed[1] == "+" else "+"
        return (
            f"'{name}' is a fixed offset, UTC{sign}{int(fixed[2]):02d}:00 all year (POSIX sign: "
            f"Etc/GMT+N is N hours behind UTC); name the zone of the place, e.g. America/New_York "
            f"or Europe/Berlin, or UTC"
        )
    return None


def validate_tz(tz: str) -> ZoneInfo:
    """The zone for an IANA name a new schedule may use; InvalidSchedule("schedule.tz", ...) for
    anything else, including the legacy names that are not places (EST, EST5EDT, Etc/GMT+5, ...)."""
    if isinstance(tz, str) and tz.strip() and len(tz) <= MAX_TZ_LENGTH:
        canonical = (
            tz
            if tz in _zone_names()
            else next((name for name in _zone_names() if name.lower() == tz.strip().lower()), None)
        )
        reason = _legacy_reason(canonical) if canonical else None
        if reason:
            raise InvalidSchedule(TZ_FIELD, reason)
    return load_zone(tz)


def load_zone(tz: str) -> ZoneInfo:
    """The zone for any IANA name zoneinfo can load, legacy ones included (a stored schedule keeps
    evaluating in the zone it was accepted with); InvalidSchedule("schedule.tz", ...) otherwise."""
    if not isinstance(tz, str) or not tz.strip():
        raise InvalidSchedule(TZ_FIELD, "is empty; use an IANA zone name such as Europe/London or UTC")
    if len(tz) > MAX_TZ_LENGTH:
        raise InvalidSchedule(TZ_FIELD, f"is {len(tz)} characters long; an IANA zone name has at most {MAX_TZ_LENGTH}")
    if tz.startswith(("/", ".")):
        raise InvalidSchedule(TZ_FIELD, f"'{tz}' is a file path, not an IANA zone name such as Europe/London")
    if tz == "localtime":
        raise InvalidSchedule(TZ_FIELD, "'localtime' is the server's own zone; name the zone, e.g. Europe/London")
    if tz not in _zone_names():
        near = [name for name in _zone_names() if name.lower() == tz.strip().lower()]
        hint = f"; did you mean '{near[0]}'?" if near else "; use an IANA name such as America/New_York or UTC"
        raise InvalidSchedule(TZ_FIELD, f"unknown time zone '{tz}'{hint}")
    try:
        return ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(TZ_FIELD, f"time zone '{tz}' cannot be loaded") from None


def as_utc(moment: datetime, name: str) -> datetime:
    """``moment`` in UTC; ValueError naming the parameter when it is naive."""
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return moment.astimezone(UTC)


@dataclass(frozen=True)
class Placement:
    kind: Literal["single", "repeat", "gap"]
    # The wall time read with fold=0 and fold=1 (PEP 495). For a repeated time, first < second
    # are its two instances; in a gap, second < transition <= first and neither is the wall time.
    first: datetime
    second: datetime


def place(wall: datetime, zone: ZoneInfo) -> Placement:
    """Where the naive wall time ``wall`` falls on the UTC time line in ``zone``."""
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return Placement("single", first, second)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return Placement("repeat", first, second)
    return Placement("gap", first, second)


def offset_at(zone: ZoneInfo, timestamp: int) -> timedelta | None:
    return datetime.fromtimestamp(timestamp, zone).utcoffset()


def first_change(zone: ZoneInfo, lo: int, hi: int) -> int:
    """The first second in (lo, hi] whose UTC offset differs from lo's (offset(hi) must differ).

    tzdata transitions fall on whole seconds, so bisecting seconds finds the exact instant.
    """
    before = offset_at(zone, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if offset_at(zone, mid) == before:
            lo = mid
        else:
            hi = mid
    return hi


def gap_end(zone: ZoneInfo, placement: Placement) -> datetime:
    """The transition instant of the gap a wall time fell into: the first valid instant after it."""
    lo, hi = int(placement.second.timestamp()), int(placement.first.timestamp())
    return datetime.fromtimestamp(first_change(zone, lo, hi), UTC)


def wall_start(zone: ZoneInfo, after: datetime) -> datetime:
    """A wall time from which to walk matches: every match at or before it is <= after.

    Both readings of a wall time (fold 0 and 1) increase with the wall time, and a gap's
    transition instant is never later than the fold=0 reading, so it suffices that the later of
    the two readings of the start is <= after. Right after a fall-back the local wall time of
    ``after`` has a second reading later than ``after``: step back until it does not.
    """
    wall = after.astimezone(zone).replace(tzinfo=None)
    back = timedelta(0)
    while True:
        placement = place(wall - back, zone)
        if max(placement.first, placement.second) <= after:
            return wall - back
        back = back * 2 if back else timedelta(hours=1)


def unsettled_windows(zone: ZoneInfo, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
    """UTC windows around each offset change near [start, end], merged and sorted.

    Outside them the offset is constant and every wall-clock match maps to exactly one
    instant, so occurrences there can be counted arithmetically. A transition of size d
    affects instants within d of it (repeated wall times) and the transition instant itself
    (gap shifts); an hour of margin on both sides keeps the argument obviously safe.
    Offsets are sampled hourly: tzdata has no two transitions within an hour of each other.
    """
    step = 3600
    margin = timedelta(hours=1)
    lo = int((start - timedelta(days=2)).timestamp())
    hi = int((end + timedelta(days=2)).timestamp())
    windows: list[tuple[datetime, datetime]] = []
    previous = offset_at(zone, lo)
    for probe in range(lo + step, hi + step, step):
        current = offset_at(zone, probe)
        if current == previous or previous is None or current is None:
            continue
        change = datetime.fromtimestamp(first_change(zone, probe - step, probe), UTC)
        size = abs(current - previous)
        window = (change - size - margin, change + size + margin)
        if windows and window[0] <= windows[-1][1]:
            windows[-1] = (windows[-1][0], max(windows[-1][1], window[1]))
        else:
            windows.append(window)
        previous = current
    return windows
