"""The cron dialect: parsing an expression into field value sets, H tokens, and field matching.

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
value lists so that any Vixie-compatible reader (croniter included) applies exactly this rule to
the resolved expression.

Matching works on naive wall-clock datetimes; placing them on the UTC time line is the zone's
business (:mod:`app.domain.schedule.zone`).
"""

from __future__ import annotations

import calendar
import functools
import hashlib
import itertools
import re
from bisect import bisect_right
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from app.errors import InvalidSchedule

CRON_FIELD = "schedule.cron"
# The longest expression accepted: a plain five-field expression with lists in every field fits in
# well under this; anything longer is not a schedule a person wrote.
MAX_CRON_LENGTH = 256

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
    re.VERBOSE,
)
_QUARTZ_ONLY = re.compile(r"^(?:\d*L|L-?\d*|\d+W|LW|.*#.*)$")

# Longest month length, February counted as 29: "0 0 29 2 *" fires in leap years, "30 2" never.
_MAX_DAYS = {month: 29 if month == 2 else calendar.monthrange(2001, month)[1] for month in range(1, 13)}


@dataclass(frozen=True)
class CompiledCron:
    """A validated expression: its resolved text and the value sets every match is decided by."""

    resolved: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # cron numbering: Sunday = 0
    days_restricted: bool
    weekdays_restricted: bool
    hour_is_wildcard: bool
    # Every matching (hour, minute), sorted, and the same as microseconds since midnight.
    times_of_day: tuple[tuple[int, int], ...]
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

    def walls_after(self, start: datetime) -> Iterator[datetime]:
        """Matching naive wall times strictly after ``start``, in order.

        Ends when no day matches for 50 years (validation refuses expressions that never match,
        and the sparsest valid one, February 29, matches every 8 years) or at the calendar's end.
        """
        times = self.times_of_day
        day = start.date()
        first = bisect_right(self.times_of_day_us, micros_of_day(start))
        searched_since = day
        while True:
            if day.month not in self.months:
                following = _first_of_next_month(day)
            else:
                if self.matches_date(day):
                    for hour, minute in times[first:] if first else times:
                        yield datetime(day.year, day.month, day.day, hour, minute)
                    searched_since = day
                following = _next_day(day)
            first = 0
            if following is None or (following - searched_since).days > _GIVE_UP_DAYS:
                return
            day = following


_ONE_DAY = timedelta(days=1)
_GIVE_UP_DAYS = 50 * 366


def micros_of_day(moment: datetime) -> int:
    return ((moment.hour * 60 + moment.minute) * 60 + moment.second) * 1_000_000 + moment.microsecond


def _next_day(day: date) -> date | None:
    return None if day == date.max else day + _ONE_DAY


def _first_of_next_month(day: date) -> date | None:
    if day.month < 12:
        return date(day.year, day.month + 1, 1)
    return None if day.year == date.max.year else date(day.year + 1, 1, 1)


def stable_int(*parts: str) -> int:
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
        raise _invalid(f"'{item}' in the {spec.label} field: step {step} is larger than the field's span ({span})")
    return step


def _stepped(start: int, stop: int, step: int) -> tuple[list[int], str]:
    """Values start..stop every step, and a rendering of them.

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
        raise _invalid(f"'{item}' in the {spec.label} field: L, W and # (Quartz extensions) are not supported")
    match = _ITEM.match(item)
    if match is None:
        raise _invalid(f"'{item}' in the {spec.label} field is not a value, range, step, name or H token")
    step = _parse_step(spec, match["step"], item)
    if match["star"]:
        if match["star"] == "?" and spec not in (_DAY, _WEEKDAY):
            raise _invalid(f"'?' is only allowed in day-of-month and day-of-week, not in the {spec.label} field")
        values = list(range(spec.low, spec.star_high + 1, step or 1))
        return values, ("*" if step is None else f"*/{step}")
    if match["hash"]:
        lo, hi = spec.low, spec.hash_high
        if match["hash_lo"] is not None:
            lo = _parse_value(spec, match["hash_lo"], item)
            hi = _parse_value(spec, match["hash_hi"], item)
            if lo > hi:
                raise _invalid(f"'{item}' in the {spec.label} field: range {lo}-{hi} runs backwards")
        draw = stable_int("cron-H", job_key, str(spec.index))
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
    """1,2,3,5 -> "1-3,5": a plain list, which every cron reader reads the same way."""
    runs: list[list[int]] = []
    for value in sorted(values):
        if runs and value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# An item that starts with H, the only place the job key enters (THU and names never start with H).
_HASH_ITEM = re.compile(r"(?:^|[\s,])H", re.IGNORECASE)


def compile_cron(expr: str, job_key: str) -> CompiledCron:
    """Parse and validate ``expr`` for one job (the key decides its H tokens).

    An expression without H tokens means the same for every job, so it is compiled once and shared:
    a tenant submitting thousands of jobs on "*/5 * * * *" pays for the parse once, not per job.
    """
    if not isinstance(expr, str):
        raise _invalid(f"is empty; expected 5 fields ({_FIELD_ORDER})")
    return _compile_cron(expr, job_key if _HASH_ITEM.search(expr) else "")


@functools.lru_cache(maxsize=4096)
def _compile_cron(expr: str, job_key: str) -> CompiledCron:
    if not expr.strip():
        raise _invalid(f"is empty; expected 5 fields ({_FIELD_ORDER})")
    if len(expr) > MAX_CRON_LENGTH:
        raise _invalid(f"is {len(expr)} characters long; at most {MAX_CRON_LENGTH}")
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
    # The day fields are rendered as plain value lists: Vixie readers then OR them exactly when
    # both are restricted (croniter treats a field containing "*" differently, see its day_or).
    rendered[2] = _compress(days) if days_restricted else "*"
    rendered[4] = _compress(weekdays) if weekdays_restricted else "*"

    if (
        days_restricted
        and not weekdays_restricted
        and not any(day <= _MAX_DAYS[month] for day in days for month in months)
    ):
        raise _invalid(f"day-of-month {_compress(days)} never occurs in month {_compress(months)}, so it never fires")

    sorted_minutes, sorted_hours = tuple(sorted(minutes)), tuple(sorted(hours))
    times = [(hour, minute) for hour in sorted_hours for minute in sorted_minutes]  # already in order
    return CompiledCron(
        resolved=" ".join(rendered),
        minutes=sorted_minutes,
        hours=sorted_hours,
        days=frozenset(days),
        months=frozenset(months),
        weekdays=frozenset(weekdays),
        days_restricted=days_restricted,
        weekdays_restricted=weekdays_restricted,
        hour_is_wildcard=rendered[1].startswith("*"),
        times_of_day=tuple(times),
        times_of_day_us=tuple((hour * 3600 + minute * 60) * 1_000_000 for hour, minute in times),
    )


_MINUTES_A_DAY = 24 * 60
# Consecutive matching days are looked for over 28 years: the Gregorian calendar's weekdays and leap
# days repeat with that period between 1901 and 2099, so every day-of-month/month/weekday mix shows.
_CALENDAR_CYCLE_START = date(2001, 1, 1)
_CALENDAR_CYCLE_DAYS = (date(2029, 1, 1) - _CALENDAR_CYCLE_START).days


def min_interval_s(expr: str, job_key: str) -> int:
    """The shortest time between two consecutive fire times of ``expr``, in seconds of wall-clock
    time (a five-field expression fires at most once a minute, so at least 60).

    Within a day it is the smallest gap between matching times of day; across midnight, the gap from
    the day's last time to the next day's first counts only if two consecutive days can both match.
    A DST change can bring two real instants closer (``repeat: twice``); wall time is what this measures.
    """
    compiled = compile_cron(expr, job_key)
    minutes = [hour * 60 + minute for hour, minute in compiled.times_of_day]
    gaps = [later - earlier for earlier, later in itertools.pairwise(minutes)]
    overnight = _MINUTES_A_DAY - minutes[-1] + minutes[0]
    if (not gaps or overnight < min(gaps)) and _consecutive_days_match(compiled):
        gaps.append(overnight)
    if not gaps:  # one time a day, never on two days running: the gap is at least a day and more
        gaps.append(overnight + _MINUTES_A_DAY)
    return min(gaps) * 60


def _consecutive_days_match(compiled: CompiledCron) -> bool:
    if not compiled.days_restricted and not compiled.weekdays_restricted and len(compiled.months) == 12:
        return True
    day = _CALENDAR_CYCLE_START
    matched = compiled.matches_date(day)
    for _ in range(_CALENDAR_CYCLE_DAYS):
        day += _ONE_DAY
        following = compiled.matches_date(day)
        if matched and following:
            return True
        matched = following
    return False


def validate_cron(expr: str, job_key: str) -> str:
    """The expression with H tokens, names and shorthands resolved to plain Vixie cron.

    Resolving is idempotent (the result resolves to itself) and keeps the meaning of the original,
    including whether the hour field is a wildcard. Raises InvalidSchedule("schedule.cron", ...)
    naming the offending part.
    """
    return compile_cron(expr, job_key).resolved
