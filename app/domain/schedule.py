"""Cron schedules: the UTC instants a cron job fires at, across DST changes. Pure; ``now`` is a parameter.

Model
-----
A cron expression is matched against *wall-clock* time in the job's IANA zone. croniter walks
naive local datetimes (it never sees a tzinfo, so its own DST handling, which has had bugs, is
never involved), and every local match is then placed on the UTC time line by our own rules:

* A wall time that exists once fires at its one instant.
* Spring forward, the wall time does not exist (it falls in a gap). ``gap="shift"`` (default)
  fires once at the first instant after the gap, which is the transition instant itself;
  ``gap="skip"`` yields a *skipped* occurrence there (``reason="dst_gap"``) that callers record and
  do not run. Several wall times in one gap, and a real occurrence at the transition instant,
  collapse into ONE occurrence: fire instants identify occurrences, so they strictly increase.
* Fall back, the wall time exists twice. A fixed hour field (any hour field not starting with
  ``*``, including ``H``) fires once, at the first instance (``repeat="once"``, default), or at
  both (``repeat="twice"``). A wildcard hour field (``*``, ``*/n``) follows elapsed time: it fires
  in both copies of the repeated hour, in real-time order.

An :class:`Occurrence` is identified by ``nominal_utc``; ``run_at`` adds the job's jitter. Next
occurrences are always computed from nominal instants, so jitter never accumulates.

Cron dialect
------------
Five fields: minute hour day-of-month month day-of-week (0-7, Sunday is 0 and 7). Lists, ranges,
steps (``*/n``, ``a-b/n``, ``a/n`` = ``a-max/n``), names (JAN-DEC, SUN-SAT, any case),
``@hourly @daily @midnight @weekly @monthly @yearly @annually``, ``?`` for ``*`` in the day
fields, and Jenkins-style hash tokens ``H``, ``H/n``, ``H(a-b)``, ``H(a-b)/n``: a value (or the
phase of a step) derived from a stable hash of the job key and field, so jobs written with ``H``
spread out while each keeps its own slot. ``H`` in day-of-month draws from 1-28 so that it fires
in every month. Seconds, years, ``@reboot``, ``L``, ``W`` and ``#`` are refused.

Day-of-month and day-of-week: when both are restricted (neither is exactly ``*`` or ``?``) a day
matches if EITHER matches (Vixie cron OR semantics, croniter's ``day_or=True`` default); when one
is ``*`` only the other one restricts. :func:`validate_cron` renders the day fields as plain
value lists so that croniter applies exactly this rule to the resolved expression.
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import heapq
import re
import zoneinfo
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Literal
from zoneinfo import ZoneInfo

from croniter import CroniterBadDateError, croniter

from app.errors import InvalidSchedule

UTC = timezone.utc
CRON_FIELD = "schedule.cron"
TZ_FIELD = "schedule.tz"

# ---------------------------------------------------------------------------------------------
# Public types
# ---------------------------------------------------------------------------------------------


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


@dataclass(frozen=True)
class CronSchedule:
    expr: str  # 5-field cron as the user gave it (may hold H tokens and names) or as resolved
    tz: str  # IANA zone name
    jitter_s: int = 0  # window; each job fires jitter_offset_s(job_key, jitter_s) after nominal
    dst: DstPolicy = DstPolicy()

    def __post_init__(self) -> None:
        if self.jitter_s < 0:
            raise InvalidSchedule("schedule.jitterSeconds", "must not be negative")


@dataclass(frozen=True)
class Occurrence:
    nominal_utc: datetime  # fire instant before jitter (aware, UTC); identifies the occurrence
    run_at: datetime  # nominal_utc + jitter offset (aware, UTC): when it must start
    # Wall-clock time it fires at (aware, in the zone, correct fold). For a gap occurrence this is
    # the first valid wall time after the gap, where a shifted one runs.
    local: datetime
    skipped: bool  # True only when gap="skip" dropped it; callers record it and do not run it
    dst_note: str | None  # human text when a DST rule moved, dropped or deduplicated it
    reason: str | None  # "dst_gap" when skipped, else None


@dataclass(frozen=True)
class MisfirePlan:
    run: list[Occurrence]  # occurrences to execute now, oldest first
    skipped_count: int  # how many missed occurrences will not run
    newest_skipped: Occurrence | None  # the newest one not run, when it is among those listed


# ---------------------------------------------------------------------------------------------
# Parsing and validation
# ---------------------------------------------------------------------------------------------

_MONTH_NAMES: Mapping[str, int] = {
    name: number
    for number, name in enumerate(
        ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"), start=1
    )
}
_WEEKDAY_NAMES: Mapping[str, int] = {
    name: number for number, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))
}

_ALIASES: Mapping[str, str] = {
    "@HOURLY": "0 * * * *",
    "@DAILY": "0 0 * * *",
    "@MIDNIGHT": "0 0 * * *",
    "@WEEKLY": "0 0 * * 0",
    "@MONTHLY": "0 0 1 * *",
    "@YEARLY": "0 0 1 1 *",
    "@ANNUALLY": "0 0 1 1 *",
}


@dataclass(frozen=True)
class _FieldSpec:
    index: int
    label: str
    low: int
    high: int  # highest value accepted when written (day-of-week accepts 7 for Sunday)
    star_high: int  # highest value "*" covers (day-of-week: 6)
    names: Mapping[str, int]
    # H without a range draws from here; day-of-month stops at 28 so it fires every month.
    hash_high: int


_MINUTE = _FieldSpec(0, "minute", 0, 59, 59, {}, 59)
_HOUR = _FieldSpec(1, "hour", 0, 23, 23, {}, 23)
_DAY = _FieldSpec(2, "day-of-month", 1, 31, 31, {}, 28)
_MONTH = _FieldSpec(3, "month", 1, 12, 12, _MONTH_NAMES, 12)
_WEEKDAY = _FieldSpec(4, "day-of-week", 0, 7, 6, _WEEKDAY_NAMES, 6)
_FIELDS = (_MINUTE, _HOUR, _DAY, _MONTH, _WEEKDAY)
_FIELD_ORDER = "minute hour day-of-month month day-of-week"

# One list item of one field. Input is upper-cased first, so names and H are case-insensitive.
_ITEM = re.compile(
    r"""^(?:
        (?P<hash>H)(?:\((?P<hash_lo>[A-Z0-9]+)-(?P<hash_hi>[A-Z0-9]+)\))?
      | (?P<star>[*?])
      | (?P<lo>[A-Z0-9]+)(?:-(?P<hi>[A-Z0-9]+))?
    )(?:/(?P<step>[0-9]+))?$""",
    re.X,
)
_QUARTZ_ONLY = re.compile(r"^(?:\d*L|L-?\d*|\d+W|LW|.*#.*)$")

# Longest month length, February counted as 29: "0 0 29 2 *" fires in leap years, "30 2" never.
_MAX_DAYS = {month: 29 if month == 2 else calendar.monthrange(2001, month)[1] for month in range(1, 13)}


@dataclass(frozen=True)
class _Cron:
    """A validated expression: the croniter form plus the value sets the bulk counter uses."""

    resolved: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # cron numbering: Sunday = 0
    days_restricted: bool
    weekdays_restricted: bool
    hour_is_wildcard: bool
    # Microseconds since midnight of every matching (hour, minute), sorted: per-day counting.
    times_of_day_us: tuple[int, ...]

    def matches_date(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = (day.weekday() + 1) % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return by_day or by_weekday
        if self.days_restricted:
            return by_day
        if self.weekdays_restricted:
            return by_weekday
        return True


def _stable_int(*parts: str) -> int:
    """A hash that is the same in every process and release (``hash()`` is salted per process)."""
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def _invalid(detail: str) -> InvalidSchedule:
    return InvalidSchedule(CRON_FIELD, detail)


def _parse_value(spec: _FieldSpec, token: str, item: str) -> int:
    if token.isdigit():
        value = int(token)
    elif token in spec.names:
        value = spec.names[token]
    elif spec.names:
        first, last = next(iter(spec.names)), list(spec.names)[-1]
        raise _invalid(f"'{item}' in the {spec.label} field: unknown name '{token}' (use {first}-{last})")
    elif token.isalpha() and len(token) == 3 and token in {**_MONTH_NAMES, **_WEEKDAY_NAMES}:
        raise _invalid(f"'{item}' in the {spec.label} field: names are only allowed in month and day-of-week")
    else:
        raise _invalid(f"'{item}' in the {spec.label} field is not a number")
    if not spec.low <= value <= spec.high:
        raise _invalid(f"'{item}' in the {spec.label} field: {value} is out of range {spec.low}-{spec.high}")
    return value


def _parse_step(spec: _FieldSpec, text: str | None, item: str) -> int | None:
    if text is None:
        return None
    step = int(text)
    span = spec.star_high - spec.low + 1
    if step < 1:
        raise _invalid(f"'{item}' in the {spec.label} field: step must be at least 1")
    if step > span:
        raise _invalid(
            f"'{item}' in the {spec.label} field: step {step} is larger than the field's span ({span})"
        )
    return step


def _stepped(start: int, stop: int, step: int) -> tuple[list[int], str]:
    """Values start..stop every step, and a croniter rendering of them.

    A single value is written as itself: croniter reads an equal range such as "59-59/15" as the
    whole field.
    """
    if start >= stop:  # also "7/2" in day-of-week: Sunday written as 7 is past "*"'s 0-6
        return [start], str(start)
    values = list(range(start, stop + 1, step))
    return values, (str(start) if len(values) == 1 else f"{start}-{stop}/{step}")


def _parse_item(spec: _FieldSpec, item: str, job_key: str) -> tuple[list[int], str]:
    """The values one list item selects, and its rendering with H tokens and names resolved."""
    if _QUARTZ_ONLY.match(item):
        raise _invalid(
            f"'{item}' in the {spec.label} field: L, W and # (Quartz extensions) are not supported"
        )
    match = _ITEM.match(item)
    if match is None:
        raise _invalid(f"'{item}' in the {spec.label} field is not a value, range, step, name or H token")
    step = _parse_step(spec, match["step"], item)
    if match["star"]:
        if match["star"] == "?" and spec not in (_DAY, _WEEKDAY):
            raise _invalid(
                f"'?' is only allowed in day-of-month and day-of-week, not in the {spec.label} field"
            )
        values = list(range(spec.low, spec.star_high + 1, step or 1))
        return values, ("*" if step is None else f"*/{step}")
    if match["hash"]:
        lo, hi = spec.low, spec.hash_high
        if match["hash_lo"] is not None:
            lo = _parse_value(spec, match["hash_lo"], item)
            hi = _parse_value(spec, match["hash_hi"], item)
            if lo > hi:
                raise _invalid(f"'{item}' in the {spec.label} field: range {lo}-{hi} runs backwards")
        draw = _stable_int("cron-H", job_key, str(spec.index))
        if step is None:
            value = lo + draw % (hi - lo + 1)
            return [value], str(value)
        # Jenkins semantics: the hash picks the phase inside the first step (or the whole range
        # if that is shorter), then the step repeats up to the end of the range.
        return _stepped(lo + draw % min(step, hi - lo + 1), hi, step)
    lo = _parse_value(spec, match["lo"], item)
    if match["hi"] is None:
        if step is None:
            return [lo], str(lo)
        return _stepped(lo, spec.star_high, step)  # "a/n" means "a-max/n"
    hi = _parse_value(spec, match["hi"], item)
    if spec is _WEEKDAY and hi == 0 and lo > 0:
        hi = 7  # "FRI-SUN": Sunday closes the week
    if lo > hi:
        raise _invalid(f"'{item}' in the {spec.label} field: range {lo}-{hi} runs backwards")
    if step is None:
        return list(range(lo, hi + 1)), (str(lo) if lo == hi else f"{lo}-{hi}")
    return _stepped(lo, hi, step)


def _compress(values: set[int]) -> str:
    """1,2,3,5 -> "1-3,5": a plain list croniter cannot read any other way."""
    runs: list[list[int]] = []
    for value in sorted(values):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


@functools.lru_cache(maxsize=4096)
def _compile(expr: str, job_key: str) -> _Cron:
    if not isinstance(expr, str) or not expr.strip():
        raise _invalid(f"is empty; expected 5 fields ({_FIELD_ORDER})")
    text = expr.strip().upper()
    if text.startswith("@"):
        if text == "@REBOOT":
            raise _invalid("@reboot is not supported: a Kairos schedule has no boot event")
        if text not in _ALIASES:
            names = ", ".join(alias.lower() for alias in _ALIASES)
            raise _invalid(f"unknown shorthand '{expr.strip()}'; use one of {names}")
        text = _ALIASES[text]
    parts = text.split()
    if len(parts) != 5:
        extra = " (seconds and year fields are not supported)" if len(parts) in (6, 7) else ""
        raise _invalid(f"expected 5 fields ({_FIELD_ORDER}), got {len(parts)}{extra}")

    value_sets: list[set[int]] = []
    rendered: list[str] = []
    for spec, part in zip(_FIELDS, parts, strict=True):
        values: set[int] = set()
        pieces = []
        for item in part.split(","):
            if not item:
                raise _invalid(f"'{part}' in the {spec.label} field has an empty list item")
            item_values, piece = _parse_item(spec, item, job_key)
            values.update(item_values)
            pieces.append(piece)
        if spec is _WEEKDAY:
            values = {v % 7 for v in values}  # 7 is Sunday
        value_sets.append(values)
        rendered.append(",".join(pieces))
    minutes, hours, days, months, weekdays = value_sets

    days_restricted = parts[2] not in ("*", "?")
    weekdays_restricted = parts[4] not in ("*", "?")
    # The day fields are rendered as plain value lists: croniter then ORs them exactly when both
    # are restricted (it treats a field containing "*" differently, see its day_or handling).
    rendered[2] = _compress(days) if days_restricted else "*"
    rendered[4] = _compress(weekdays) if weekdays_restricted else "*"

    if days_restricted and not weekdays_restricted:
        if not any(day <= _MAX_DAYS[month] for day in days for month in months):
            raise _invalid(
                f"day-of-month {_compress(days)} never occurs in month {_compress(months)}, so it never fires"
            )

    times = sorted((hour * 3600 + minute * 60) * 1_000_000 for hour in hours for minute in minutes)
    return _Cron(
        resolved=" ".join(rendered),
        minutes=tuple(sorted(minutes)),
        hours=tuple(sorted(hours)),
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(weekdays),
        days_restricted=days_restricted,
        weekdays_restricted=weekdays_restricted,
        hour_is_wildcard=rendered[1].startswith("*"),
        times_of_day_us=tuple(times),
    )


def validate_cron(expr: str, job_key: str) -> str:
    """The expression with H tokens, names and shorthands resolved, in a form croniter reads.

    Resolving is idempotent (the result resolves to itself) and keeps the meaning of the original,
    including whether the hour field is a wildcard. Raises InvalidSchedule("schedule.cron", ...)
    naming the offending part.
    """
    return _compile(expr, job_key).resolved


# Names zoneinfo can load that are not portable zones: the server's own zone, tzdata internals.
_NOT_ZONES = frozenset({"localtime", "posixrules", "Factory"})


@functools.cache
def _zone_names() -> frozenset[str]:
    return frozenset(zoneinfo.available_timezones()) - _NOT_ZONES


def validate_tz(tz: str) -> ZoneInfo:
    """The zone for an IANA name; InvalidSchedule("schedule.tz", ...) for anything else."""
    if not isinstance(tz, str) or not tz.strip():
        raise InvalidSchedule(TZ_FIELD, "is empty; use an IANA zone name such as Europe/London or UTC")
    if tz.startswith("/") or tz.startswith("."):
        raise InvalidSchedule(TZ_FIELD, f"'{tz}' is a file path, not an IANA zone name such as Europe/London")
    if tz == "localtime":
        raise InvalidSchedule(
            TZ_FIELD, "'localtime' is the server's own zone; name the zone, e.g. Europe/London"
        )
    if tz not in _zone_names():
        near = [name for name in _zone_names() if name.lower() == tz.strip().lower()]
        hint = (
            f"; did you mean '{near[0]}'?" if near else "; use an IANA name such as America/New_York or UTC"
        )
        raise InvalidSchedule(TZ_FIELD, f"unknown time zone '{tz}'{hint}")
    try:
        return ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidSchedule(TZ_FIELD, f"time zone '{tz}' cannot be loaded") from None


def jitter_offset_s(job_key: str, window_s: int) -> int:
    """This job's slot in the jitter window: stable across processes, 0 without a window."""
    if window_s < 0:
        raise InvalidSchedule("schedule.jitterSeconds", "must not be negative")
    if window_s == 0:
        return 0
    return _stable_int("jitter", job_key) % window_s


# ---------------------------------------------------------------------------------------------
# Placing wall-clock matches on the UTC time line
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Placement:
    kind: Literal["single", "repeat", "gap"]
    # The wall time read with fold=0 and fold=1 (PEP 495). For a repeated time, first < second
    # are its two instances; in a gap, second < transition <= first and neither is the wall time.
    first: datetime
    second: datetime


def _place(wall: datetime, zone: ZoneInfo) -> _Placement:
    first = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if first == second:
        return _Placement("single", first, second)
    if first.astimezone(zone).replace(tzinfo=None) == wall:
        return _Placement("repeat", first, second)
    return _Placement("gap", first, second)


def _offset_at(zone: ZoneInfo, timestamp: int) -> timedelta | None:
    return datetime.fromtimestamp(timestamp, zone).utcoffset()


def _first_change(zone: ZoneInfo, lo: int, hi: int) -> int:
    """The first second in (lo, hi] whose UTC offset differs from lo's (offset(hi) must differ).

    tzdata transitions fall on whole seconds, so bisecting seconds finds the exact instant.
    """
    before = _offset_at(zone, lo)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _offset_at(zone, mid) == before:
            lo = mid
        else:
            hi = mid
    return hi


def _gap_end(zone: ZoneInfo, placement: _Placement) -> datetime:
    """The transition instant of the gap a wall time fell into: the first valid instant after it."""
    lo, hi = int(placement.second.timestamp()), int(placement.first.timestamp())
    return datetime.fromtimestamp(_first_change(zone, lo, hi), UTC)


def _wall_start(zone: ZoneInfo, after: datetime) -> datetime:
    """A wall time from which croniter may start: every match at or before it is <= after.

    Both readings of a wall time (fold 0 and 1) increase with the wall time, and a gap's
    transition instant is never later than the fold=0 reading, so it suffices that the later of
    the two readings of the start is <= after. Right after a fall-back the local wall time of
    ``after`` has a second reading later than ``after``: step back until it does not.
    """
    wall = after.astimezone(zone).replace(tzinfo=None)
    back = timedelta(0)
    while True:
        placement = _place(wall - back, zone)
        if max(placement.first, placement.second) <= after:
            return wall - back
        back = back * 2 if back else timedelta(hours=1)


@dataclass
class _Pending:
    """Everything that landed on one UTC instant while it waits in the look-ahead buffer."""

    nominal: datetime
    real: bool = False  # a wall time that exists fires here
    gap_walls: list[datetime] = field(default_factory=list)  # non-existent wall times moved here
    repeat_note: str | None = None


def _hhmm(moment: datetime) -> str:
    return moment.strftime("%H:%M")


@dataclass(frozen=True)
class _Evaluator:
    cron: _Cron
    zone: ZoneInfo
    dst: DstPolicy
    jitter: timedelta

    @classmethod
    def of(cls, schedule: CronSchedule, job_key: str) -> _Evaluator:
        return cls(
            cron=_compile(schedule.expr, job_key),
            zone=validate_tz(schedule.tz),
            dst=schedule.dst,
            jitter=timedelta(seconds=jitter_offset_s(job_key, schedule.jitter_s)),
        )

    def occurrences(self, after: datetime) -> Iterator[Occurrence]:
        """Occurrences with nominal_utc > after, strictly increasing.

        Wall times arrive from croniter in local order, but their instants are not in UTC order
        around a fall-back (01:30 EST comes after 01:45 EDT), and several can land on one instant
        in a gap. So candidates wait in a small buffer keyed by instant, merged when they
        coincide, and leave it once no later wall time can produce an earlier or equal instant.
        That bound is the earlier reading of the latest wall time: both readings increase with
        the wall time, and a gap's transition instant lies after the fold=1 reading.
        """
        pending: dict[datetime, _Pending] = {}
        order: list[datetime] = []

        def at(nominal: datetime) -> _Pending | None:
            if nominal <= after:
                return None
            if nominal not in pending:
                pending[nominal] = _Pending(nominal)
                heapq.heappush(order, nominal)
            return pending[nominal]

        walls = croniter(self.cron.resolved, _wall_start(self.zone, after))
        while True:
            try:
                wall: datetime = walls.get_next(datetime)
            except CroniterBadDateError:
                break  # no match within croniter's 50-year search: the schedule has ended
            placement = _place(wall, self.zone)
            if placement.kind == "single":
                if slot := at(placement.first):
                    slot.real = True
            elif placement.kind == "repeat":
                self._place_repeat(wall, placement, at)
            else:
                if slot := at(_gap_end(self.zone, placement)):
                    slot.gap_walls.append(wall)
            horizon = min(placement.first, placement.second)
            while order and order[0] <= horizon:
                yield self._finish(pending.pop(heapq.heappop(order)))
        while order:
            yield self._finish(pending.pop(heapq.heappop(order)))

    def _place_repeat(
        self, wall: datetime, placement: _Placement, at: Callable[[datetime], _Pending | None]
    ) -> None:
        if self.cron.hour_is_wildcard:
            # Elapsed-time semantics: the repeated hour is simply an hour that passes twice.
            for instant in (placement.first, placement.second):
                if slot := at(instant):
                    slot.real = True
            return
        first_name = placement.first.astimezone(self.zone).tzname()
        second_name = placement.second.astimezone(self.zone).tzname()
        head = f"{_hhmm(wall)} occurs twice on {wall.date().isoformat()} (fall back)"
        if self.dst.repeat == "twice":
            note = f"{head}; runs at both ({first_name}, then {second_name})"
            instants = (placement.first, placement.second)
        else:
            note = f"{head}; runs once, at the first ({first_name})"
            instants = (placement.first,)
        for instant in instants:
            if slot := at(instant):
                slot.real = True
                slot.repeat_note = note

    def _finish(self, slot: _Pending) -> Occurrence:
        local = slot.nominal.astimezone(self.zone)
        note, skipped = slot.repeat_note, False
        if slot.gap_walls:
            times = ", ".join(_hhmm(wall) for wall in slot.gap_walls)
            verb = "does" if len(slot.gap_walls) == 1 else "do"
            head = f"{verb} not exist on {slot.gap_walls[0].date().isoformat()} (spring forward)"
            there = f"{_hhmm(local)} {local.tzname()}"
            if self.dst.gap == "skip":
                if slot.real:
                    # The instant belongs to a real occurrence, which must still run; the dropped
                    # wall times share its identity, so they are reported here, not separately.
                    note = f"{times} skipped: {head}; the {there} occurrence runs as usual"
                else:
                    skipped = True
                    note = f"{times} skipped: {head}"
            else:
                note = f"{times} {head}; moved to {there}"
                merged = len(slot.gap_walls) + slot.real
                if slot.real:
                    note += ", where an occurrence already runs"
                if merged > 1:
                    note += f" ({merged} occurrences merged into one)"
        return Occurrence(
            nominal_utc=slot.nominal,
            run_at=slot.nominal + self.jitter,
            local=local,
            skipped=skipped,
            dst_note=note,
            reason="dst_gap" if skipped else None,
        )

    # -- counting without listing -------------------------------------------------------------

    def unsettled_windows(self, start: datetime, end: datetime) -> list[tuple[datetime, datetime]]:
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
        previous = _offset_at(self.zone, lo)
        for probe in range(lo + step, hi + step, step):
            current = _offset_at(self.zone, probe)
            if current == previous or previous is None or current is None:
                continue
            change = datetime.fromtimestamp(_first_change(self.zone, probe - step, probe), UTC)
            size = abs(current - previous)
            window = (change - size - margin, change + size + margin)
            if windows and window[0] <= windows[-1][1]:
                windows[-1] = (windows[-1][0], max(windows[-1][1], window[1]))
            else:
                windows.append(window)
            previous = current
        return windows

    def count(self, start: datetime, end: datetime, windows: list[tuple[datetime, datetime]]) -> int:
        """How many non-skipped occurrences have start < nominal_utc <= end."""
        total = 0
        cursor = start
        for window_start, window_end in windows:
            if window_end <= cursor or window_start >= end:
                continue
            if window_start > cursor:
                total += self._count_settled(cursor, window_start)
                cursor = window_start
            stop = min(window_end, end)
            for occurrence in self.occurrences(cursor):
                if occurrence.nominal_utc > stop:
                    break
                total += not occurrence.skipped
            cursor = stop
        if cursor < end:
            total += self._count_settled(cursor, end)
        return total

    def _count_settled(self, start: datetime, end: datetime) -> int:
        """Occurrences in (start, end] when the UTC offset is constant there: wall matches."""
        offset = start.astimezone(self.zone).utcoffset()
        assert offset is not None
        first_wall = (start + offset).replace(tzinfo=None)
        last_wall = (end + offset).replace(tzinfo=None)
        return self._count_walls(first_wall, last_wall)

    def _count_walls(self, after: datetime, until: datetime) -> int:
        """Matching wall times w with after < w <= until, a day at a time."""
        if until <= after:
            return 0
        times = self.cron.times_of_day_us
        after_us, until_us = _micros_of_day(after), _micros_of_day(until)
        first_day, last_day = after.date(), until.date()
        matches = self.cron.matches_date
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


def _micros_of_day(moment: datetime) -> int:
    return ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond


def _as_utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be timezone-aware")
    return moment.astimezone(UTC)


# ---------------------------------------------------------------------------------------------
# Public functions
# ---------------------------------------------------------------------------------------------


def occurrences_after(schedule: CronSchedule, after_utc: datetime, job_key: str) -> Iterator[Occurrence]:
    """Occurrences with nominal_utc strictly after ``after_utc`` (a nominal instant), forever.

    Strictly increasing nominal_utc; includes skipped ones (gap="skip") so callers can record
    them. Invalid schedules raise here, not on the first ``next()``.
    """
    evaluator = _Evaluator.of(schedule, job_key)
    return evaluator.occurrences(_as_utc(after_utc, "after_utc"))


def next_occurrence(schedule: CronSchedule, after_utc: datetime, job_key: str) -> Occurrence:
    """The first occurrence that runs (not skipped) strictly after ``after_utc``.

    Raises StopIteration if the schedule never fires again (croniter found no match within 50
    years; validation already refuses expressions that can never match).
    """
    return next(occ for occ in occurrences_after(schedule, after_utc, job_key) if not occ.skipped)


def preview(
    schedule: CronSchedule, from_utc: datetime, count: int, job_key: str = "preview"
) -> list[Occurrence]:
    """The next ``count`` occurrences strictly after ``from_utc``, skipped ones included (marked)."""
    if count < 0:
        raise ValueError("count must not be negative")
    found: list[Occurrence] = []
    if count == 0:
        return found
    for occurrence in occurrences_after(schedule, from_utc, job_key):
        found.append(occurrence)
        if len(found) == count:
            break
    return found


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
    evaluator = _Evaluator.of(schedule, job_key)
    start, end = _as_utc(last_nominal_utc, "last_nominal_utc"), _as_utc(now_utc, "now_utc")
    if end <= start:
        return [], 0
    windows = evaluator.unsettled_windows(start, end)
    total = evaluator.count(start, end, windows)
    if total == 0 or cap == 0:
        return [], total
    # Find a recent start that still holds the newest min(cap, total), growing the tail 4x at a
    # time, then list only that tail.
    wanted = min(cap, total)
    span = timedelta(hours=1)
    while True:
        tail_start = max(start, end - span)
        if tail_start == start or evaluator.count(tail_start, end, windows) >= wanted:
            break
        span *= 4
    newest: deque[Occurrence] = deque(maxlen=cap)
    for occurrence in evaluator.occurrences(tail_start):
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
