"""Classic cron's clock: a port of cronie's main loop (docs/crontab.md, "Classic cron's clock")."""

from __future__ import annotations

import bisect
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo

from app.domain.crontab._parse import DEFAULT_DST, JOB_KEY, KEYWORDS, MAX_RANGE, UTC
from app.domain.schedule import CronSchedule, DstPolicy, Occurrence, occurrences_after
from app.domain.schedule.cron import CompiledCron, compile_cron
from app.errors import InvalidInput

# -- classic cron's clock ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClassicEntry:
    """A line as cronie's find_jobs sees it: the field value sets and entry.c's star flags."""

    cron: CompiledCron
    minutes: frozenset[int]
    hours: frozenset[int]
    min_star: bool
    hr_star: bool
    dom_star: bool
    dow_star: bool

    @classmethod
    def of(cls, fields: str) -> ClassicEntry:
        fields = KEYWORDS.get(fields.strip().lower(), fields)
        parts = fields.split()
        compiled = compile_cron(fields, JOB_KEY)
        return cls(
            compiled,
            frozenset(compiled.minutes),
            frozenset(compiled.hours),
            *(parts[i].startswith("*") for i in (0, 1, 2, 4)),
        )

    @property
    def wildcard(self) -> bool:
        """cronie's "wildcard" job (MIN_STAR|HR_STAR): minute or hour field starts with '*'."""
        return self.min_star or self.hr_star

    @property
    def day_rule_differs(self) -> bool:
        """Whether cron ANDs the day fields where Kairos ORs them (a day field like '*/2')."""
        return (self.dom_star or self.dow_star) and self.cron.days_restricted and self.cron.weekdays_restricted

    def matches_minute(self, local_minute: int) -> bool:
        """Whether the wall time ``local_minute`` (minutes since 1970-01-01 00:00, naive) matches."""
        if local_minute % 60 not in self.minutes or local_minute // 60 % 24 not in self.hours:
            return False
        day = _EPOCH_DAY + timedelta(days=local_minute // 1440)
        c = self.cron
        if day.month not in c.months:
            return False
        by_day = day.day in c.days
        by_weekday = (day.weekday() + 1) % 7 in c.weekdays
        return (by_day and by_weekday) if self.dom_star or self.dow_star else (by_day or by_weekday)

    def matches(self, wall: datetime) -> bool:
        return self.matches_minute(_local_minute(wall))


_EPOCH_DAY = date(1970, 1, 1)
_EPOCH_WALL = datetime(1970, 1, 1)


def _local_minute(wall: datetime) -> int:
    return (wall - _EPOCH_WALL) // timedelta(minutes=1)


def _wall(local_minute: int) -> datetime:
    return _EPOCH_WALL + timedelta(minutes=local_minute)


def _instant(seconds: int) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


How = Literal["on time", "catch-up", "second pass", "after a jump"]


@dataclass(frozen=True)
class ClassicRun:
    at: datetime  # the UTC minute of the wake that ran it
    wall: datetime  # the naive wall time it ran for
    how: How


class _Offsets:
    """A zone's (UTC offset, is-DST) by instant, as localtime() reports them, for one range."""

    def __init__(self, zone: ZoneInfo, lo: int, hi: int) -> None:
        self.zone = zone
        self.starts: list[int] = [lo]
        self.states: list[tuple[int, bool]] = [self._state(lo)]
        step = 3600  # tzdata has no two changes within an hour of each other
        for probe in range(lo + step, hi + step, step):
            if self._state(probe) != self.states[-1]:
                low, high = probe - step, probe
                while high - low > 1:
                    mid = (low + high) // 2
                    low, high = (mid, high) if self._state(mid) == self.states[-1] else (low, mid)
                self.starts.append(high)
                self.states.append(self._state(high))

    def _state(self, seconds: int) -> tuple[int, bool]:
        moment = datetime.fromtimestamp(seconds, self.zone)
        offset, dst = moment.utcoffset(), moment.dst()
        return (int(offset.total_seconds()) if offset else 0), bool(dst)

    def at(self, seconds: int) -> tuple[int, bool]:
        return self.states[bisect.bisect_right(self.starts, seconds) - 1]

    def changes(self) -> Iterator[tuple[int, int, int]]:
        """(instant, offset before, offset after) of every offset change."""
        for i in range(1, len(self.starts)):
            before, after = self.states[i - 1][0], self.states[i][0]
            if before != after:
                yield self.starts[i], before, after


def _minute_span(start: datetime, end: datetime) -> tuple[int, int]:
    for name, moment in (("start", start), ("end", end)):
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError(f"{name} must be timezone-aware")
    lo = -(-int(start.timestamp()) // 60) * 60
    hi = -(-int(end.timestamp()) // 60) * 60
    if hi - lo > MAX_RANGE.total_seconds():
        raise InvalidInput("to", f"the range is at most {MAX_RANGE.days} days")
    return lo, hi


Wakeup = Literal["small", "medium", "negative", "large"]


@dataclass(frozen=True)
class ClockJump:
    """A wake whose minute did not follow the last one: how far the daemon's clock moved, and the
    case of cron.c's switch it took."""

    at: datetime
    minutes: int  # timeDiff - 1: the minutes skipped (negative: gone back)
    wakeup: Wakeup


@dataclass(frozen=True)
class Simulation:
    runs: tuple[ClassicRun, ...]
    jumps: tuple[ClockJump, ...]

    def jump_at(self, at: datetime) -> ClockJump | None:
        return next((j for j in self.jumps if j.at == at), None)


def classic_runs(
    entry: ClassicEntry, zone: ZoneInfo, start: datetime, end: datetime, *, daemon_zone: ZoneInfo | None = None
) -> list[ClassicRun]:
    """When classic cron (cronie, Vixie cron 4.1) runs ``entry`` from ``start`` to before ``end``.

    Without ``daemon_zone`` the daemon runs in ``zone``; with it, ``entry`` is a CRON_TZ=``zone``
    job on a daemon in ``daemon_zone`` (see the module docstring).
    """
    return list(simulate(entry, zone, start, end, daemon_zone=daemon_zone).runs)


def simulate(
    entry: ClassicEntry, zone: ZoneInfo, start: datetime, end: datetime, *, daemon_zone: ZoneInfo | None = None
) -> Simulation:
    """:func:`classic_runs`, and the clock jumps the daemon saw on the way."""
    lo, hi = _minute_span(start, end)
    clock_zone = daemon_zone or zone
    daemon = _Offsets(clock_zone, lo - 3 * 86400, hi + 86400)
    job = _Offsets(zone, lo - 3 * 86400, hi + 86400) if daemon_zone is not None else None
    runs: list[ClassicRun] = []
    jumps: list[ClockJump] = []

    # set_time(TRUE) a minute before the range, so that the first wake is the range's first minute.
    gmtoff, isdst = daemon.at(lo - 60)
    time_running = virtual_time = (lo - 60 + gmtoff) // 60
    old_gmtoff = gmtoff
    now = lo

    def find_jobs(vtime: int, do_wild: bool, do_non_wild: bool, v_gmtoff: int, how: How) -> None:
        if job is not None:
            # CRON_TZ: localtime(virtualSecond - vGMToff) in the job's zone, never during a switch.
            seconds = vtime * 60 - v_gmtoff
            local = (seconds + job.at(seconds)[0]) // 60
            if not entry.matches_minute(local) or v_gmtoff != gmtoff:
                return
        else:
            local = vtime
            if not entry.matches_minute(local):
                return
        if (do_non_wild and not entry.wildcard) or (do_wild and entry.wildcard):
            runs.append(ClassicRun(_instant(now), _wall(local), how))

    for now in range(lo, hi, 60):
        offset, dst = daemon.at(now)
        if dst != isdst:  # set_time re-reads the offset only when tm_isdst flips
            isdst, gmtoff = dst, offset
        clock_time = (now + gmtoff) // 60
        if clock_time == time_running:
            continue  # the minute has not changed: keep sleeping
        if clock_time - time_running != 1:
            ahead = clock_time - virtual_time
            kind: Wakeup = (
                "large" if abs(ahead) > 180 else "medium" if ahead > 5 else "small" if ahead > 0 else "negative"
            )
            jumps.append(ClockJump(_instant(now), clock_time - time_running - 1, kind))
        time_running = clock_time
        diff = time_running - virtual_time
        if diff == 1:
            virtual_time = time_running
            old_gmtoff = gmtoff
            find_jobs(virtual_time, True, True, old_gmtoff, "on time")
        elif diff > 180 or diff < -180:  # large: jump virtual time, run everything for now
            virtual_time = time_running
            old_gmtoff = gmtoff
            find_jobs(time_running, True, True, gmtoff, "after a jump")
        elif diff > 5:  # medium: wildcard jobs for now, fixed-time jobs for every minute missed
            find_jobs(time_running, True, False, gmtoff, "on time")
            while True:
                virtual_time += 1
                if virtual_time >= time_running:
                    old_gmtoff = gmtoff
                find_jobs(
                    virtual_time, False, True, old_gmtoff, "on time" if virtual_time >= time_running else "catch-up"
                )
                if virtual_time >= time_running:
                    break
        elif diff > 0:  # small: woke late, run every job for each minute missed
            while True:
                virtual_time += 1
                if virtual_time >= time_running:
                    old_gmtoff = gmtoff
                find_jobs(
                    virtual_time, True, True, old_gmtoff, "on time" if virtual_time >= time_running else "catch-up"
                )
                if virtual_time >= time_running:
                    break
        else:  # negative: wildcard jobs only; virtual time waits for the clock
            find_jobs(time_running, True, False, gmtoff, "second pass")
    return Simulation(tuple(runs), tuple(jumps))


def kairos_occurrences(
    fields: str, zone: str, start: datetime, end: datetime, dst: DstPolicy = DEFAULT_DST
) -> list[Occurrence]:
    """Kairos's occurrences of the schedule with nominal time in [start, end), skipped ones included."""
    lo, hi = _minute_span(start, end)
    found = []
    schedule = CronSchedule(expr=fields, tz=zone, dst=dst)
    for occurrence in occurrences_after(schedule, _instant(lo) - timedelta(microseconds=1), JOB_KEY):
        if occurrence.nominal_utc >= _instant(hi):
            break
        found.append(occurrence)
    return found
