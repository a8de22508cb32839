"""Crontab files, and classic cron's clock next to Kairos's. Pure; the range is a parameter.

Reading a file
--------------
:func:`parse_crontab` reads a user crontab as cronie does (``src/user.c`` ``load_user``, ``src/env.c``
``load_env``, ``src/entry.c`` ``load_entry``): blank lines and lines whose first non-blank character
is ``#`` are ignored; a line that parses as ``NAME = value`` (either side may be quoted) sets a
variable for the lines *below* it; every other line is five time fields or an ``@keyword`` and a
command. In the command an unescaped ``%`` ends the command and starts its standard input (later
``%`` become newlines, ``\\%`` is a literal ``%``: ``src/do_command.c``). ``CRON_TZ`` (or ``TZ``) is the
zone of the lines below it (``TZ`` also stays in the command's environment), ``SHELL`` and ``MAILTO``
are kept apart, every other variable goes to the job's environment. The time fields are compiled by
Kairos's own cron dialect (:mod:`app.domain.schedule.cron`), refusing what classic cron would not
read (``H``, ``?``, ``a/n``, cronie's ``~``); ``@reboot`` has no equivalent and is refused, or, when
the caller collects them, skipped and reported as a :class:`SkippedLine`. Errors name the line.

Classic cron's clock
--------------------
:func:`classic_runs` is a port of cronie's main loop (``src/cron.c`` at cronie-crond/cronie 5f9f16b,
the loop after ``set_time(TRUE)`` and ``find_jobs``; Vixie cron 4.1 has the same loop). The daemon
keeps two clocks in *local* minutes since the epoch: ``timeRunning`` (the minute it woke in,
``(now + GMToff) / 60``, where ``set_time`` re-reads ``GMToff`` only when ``tm_isdst`` flips) and
``virtualTime`` (the minute it would be if nobody changed the clock). Every wake it classifies
``timeDiff = timeRunning - virtualTime``:

* ``1``: the normal minute; every job matching it runs.
* ``2..5`` ("small": woke late): every job runs for each missed minute, caught up at once.
* ``6..180`` ("medium", e.g. DST begins): jobs with ``*`` first in their minute or hour field
  (``MIN_STAR|HR_STAR``, "wildcard" jobs) run for the new minute only; the other, fixed-time jobs
  run for every skipped minute, right away ("run any fixed-time jobs that would otherwise be
  skipped"). cronie sleeps 10 s between those catch-up runs; we count them all at the wake minute.
* ``<= 0`` and ``>= -180`` ("negative", e.g. DST ends): only wildcard jobs run, and ``virtualTime``
  stays put until the clock catches up, so "the fixed-time jobs probably have already run, and
  should not be repeated".
* ``> 180`` or ``< -180`` ("large"): a clock change, not DST: ``virtualTime`` jumps and only the
  new minute runs. A jump forward of 3 h or more is therefore never caught up.

``find_jobs`` matches a wall time with the day rule of ``src/entry.c``: when day-of-month or
day-of-week starts with ``*`` (``DOM_STAR``/``DOW_STAR``, so ``*/2`` counts) both must match,
otherwise either may. Kairos ORs the day fields only when neither is exactly ``*`` or ``?``.

Two daemon models are supported. By default the daemon runs in the job's zone (its ``TZ``): the
loop above, the model Vixie cron documents. With ``daemon_zone`` the job is a cronie ``CRON_TZ``
job on a daemon running in another zone: the loop runs on the daemon's clock and each job minute
is read in the job's zone from ``virtualTime - GMToff``, and cronie skips ``CRON_TZ`` jobs while the
daemon's own offset is changing ("do not try to run the jobs from different timezones during the
DST switch of the default timezone"; its comment says this support "is not perfect").

:func:`compare` sets those runs beside the occurrences of the Kairos schedule
(:func:`app.domain.schedule.occurrences_after`) and explains every difference.
"""

from __future__ import annotations

import bisect
import hashlib
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from typing import Any, Literal
from zoneinfo import ZoneInfo

from app.domain.schedule import CronSchedule, DstPolicy, Occurrence, occurrences_after, validate_tz
from app.domain.schedule.cron import CompiledCron, compile_cron
from app.domain.schedule.zone import place
from app.errors import InvalidInput, InvalidSchedule

UTC = timezone.utc
# The job key H tokens would hash by; crontab lines have none (they are refused), so any constant.
JOB_KEY = "crontab"
# A range longer than this is refused: the simulation walks it minute by minute.
MAX_RANGE = timedelta(days=366)
DEFAULT_DST = DstPolicy()  # Kairos's defaults: gap "shift", repeat "once"

KEYWORDS: Mapping[str, str] = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# Variables that are not the job's environment: the zone of the lines below, and how cron runs them.
ZONE_VARIABLES = ("CRON_TZ", "TZ")
SHELL, MAILTO = "SHELL", "MAILTO"

# load_env: a name (quoted, or up to blanks or '='), blanks, '=', blanks, a value (quoted, or the
# rest with trailing blanks trimmed).
_ENV_LINE = re.compile(
    r"""^\s*(?:'(?P<qname1>[^'=]*)'|"(?P<qname2>[^"=]*)"|(?P<name>[^\s='"][^\s=]*))\s*=\s*
        (?:'(?P<qvalue1>[^']*)'\s*|"(?P<qvalue2>[^"]*)"\s*|(?P<value>(?:[^'"\s].*?)?)\s*)$""",
    re.VERBOSE,
)
_STEP_AFTER_NUMBER = re.compile(r"^[A-Za-z0-9]+/\d+$")


@dataclass(frozen=True)
class CrontabEntry:
    """One job line of a crontab, with the variables set above it."""

    line: int  # 1-based line number in the file
    text: str  # the line as written
    schedule: str  # the time fields as written: five fields, or an @keyword
    fields: str  # the five time fields (@keywords expanded)
    command: str  # up to the first unescaped %, with \\% read as %
    stdin: str | None  # after the first %: what cron writes to the command's standard input
    env: Mapping[str, str]  # variables set above the line (not the zone, SHELL or MAILTO)
    shell: str | None
    mailto: str | None
    tz: str | None  # CRON_TZ or TZ in effect (None: the caller's default zone)
    tz_variable: str | None  # which of them set tz
    repeat: int  # how many identical lines came before this one (each runs in classic cron)

    def zone(self, default: str | None) -> str:
        zone = self.tz or default
        if zone is None:
            raise InvalidInput(f"line {self.line}", "no CRON_TZ or TZ above it: give the zone with --tz")
        return zone

    def payload(self) -> dict[str, Any]:
        """What the job carries: the command line and its environment (and how cron would run it)."""
        body: dict[str, Any] = {"command": self.command, "env": dict(self.env)}
        if self.stdin is not None:
            body["stdin"] = self.stdin
        if self.shell is not None:
            body["shell"] = self.shell
        if self.mailto is not None:
            body["mailto"] = self.mailto
        return body

    def idempotency_key(self, mode: str) -> str:
        """Derived from the line's content (and which identical line it is), so importing the file
        again returns the same jobs; ``mode`` keeps dry-run jobs and real ones apart."""
        normal = " ".join(self.text.split())
        digest = hashlib.sha256(f"crontab-v1\n{mode}\n{normal}\n{self.repeat}".encode()).hexdigest()
        return f"crontab-{digest[:40]}"


def job_body(entry: CrontabEntry, *, tz: str, target_type: str, target_ref: str, name_prefix: str,
             dry_run: bool, revision: int = 1) -> dict[str, Any]:
    """The POST /v1/jobs:batch item for one line (its idempotencyKey included). A ``revision`` other
    than 1 starts a new set of keys: for lines whose settings changed after their jobs were cancelled."""
    mode = "dry-run" if dry_run else "live"
    summary = " ".join(entry.command.split())
    body: dict[str, Any] = {
        "name": (name_prefix + summary)[:200],
        "target": {"type": target_type, "ref": target_ref},
        "schedule": {"cron": entry.schedule, "tz": tz},
        "payload": entry.payload(),
        "idempotencyKey": entry.idempotency_key(mode if revision == 1 else f"{mode}/r{revision}"),
    }
    if dry_run:
        body["dryRun"] = True
    return body


@dataclass(frozen=True)
class SkippedLine:
    """A line Kairos cannot schedule (``@reboot``), left out of an import that asked to skip such lines."""

    line: int
    text: str  # as written, without surrounding blanks
    reason: str


REBOOT_REASON = "@reboot runs when the machine boots, and Kairos has no boot event; start it from the service manager"


def _line_error(line: int, detail: str) -> InvalidInput:
    return InvalidInput(f"line {line}", detail)


def split_command(raw: str) -> tuple[str, str | None]:
    """cronie's do_command: the command up to the first unescaped %, and the input after it."""
    command: list[str] = []
    i = 0
    while i < len(raw):
        ch = raw[i]
        if ch == "\\" and i + 1 < len(raw) and raw[i + 1] == "%":
            command.append("%")
            i += 2
            continue
        if ch == "%":
            break
        command.append(ch)
        i += 1
    else:
        return "".join(command), None
    rest, data = raw[i + 1:], []
    j = 0
    while j < len(rest):
        if rest[j] == "\\" and j + 1 < len(rest) and rest[j + 1] == "%":
            data.append("%")
            j += 2
            continue
        data.append("\n" if rest[j] == "%" else rest[j])
        j += 1
    text = "".join(data)
    return "".join(command), text if text.endswith("\n") or not text else text + "\n"


def _env_setting(text: str) -> tuple[str, str] | None:
    match = _ENV_LINE.match(text)
    if match is None:
        return None
    name = match["qname1"] if match["qname1"] is not None else match["qname2"] or match["name"]
    for group in ("qvalue1", "qvalue2", "value"):
        if match[group] is not None:
            return name, match[group]
    return name, ""


def _classic_fields(fields: str, line: int) -> str:
    """Refuse what classic cron would not read, then compile with Kairos's dialect."""
    for label, part in zip(("minute", "hour", "day-of-month", "month", "day-of-week"), fields.split(), strict=True):
        for item in part.split(","):
            if item[:1].upper() == "H":
                raise _line_error(line, f"'{item}' in the {label} field is a Kairos H token, not classic cron")
            if "?" in item or "~" in item:
                raise _line_error(line, f"'{item}' in the {label} field is not classic cron syntax")
            if _STEP_AFTER_NUMBER.match(item):
                raise _line_error(line, f"'{item}' in the {label} field: classic cron takes a step only after "
                                        "* or a range (write a-b/n)")
    try:
        compile_cron(fields, JOB_KEY)
    except InvalidSchedule as exc:
        raise _line_error(line, exc.detail) from None
    return fields


def parse_crontab(text: str, *, skipped: list[SkippedLine] | None = None) -> list[CrontabEntry]:
    """Every job line of a user crontab; InvalidInput("line N", ...) for the first line cron would
    refuse or Kairos cannot schedule. ``@reboot`` lines are refused too, unless ``skipped`` is given:
    then each is appended to it and the rest of the file is read."""
    env: dict[str, str] = {}
    tz: str | None = None
    tz_variable: str | None = None
    shell: str | None = None
    mailto: str | None = None
    seen: Counter[str] = Counter()
    entries: list[CrontabEntry] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if "\x00" in raw:
            raise _line_error(number, "contains the NUL character")
        setting = _env_setting(raw)
        if setting is not None:
            name, value = setting
            if name in ZONE_VARIABLES:
                if name == "TZ":
                    env[name] = value  # also the command's own zone, as cron exports it
                if value:
                    try:
                        validate_tz(value)
                    except InvalidSchedule as exc:
                        raise _line_error(number, f"{name}: {exc.detail}") from None
                # CRON_TZ outranks TZ for scheduling (cronie reads only CRON_TZ); either one
                # set empty clears it.
                if name == "CRON_TZ" or tz_variable != "CRON_TZ":
                    tz, tz_variable = (value, name) if value else (None, None)
            elif name == SHELL:
                shell = value
            elif name == MAILTO:
                mailto = value
            else:
                env[name] = value
            continue
        words = stripped.split()
        if words[0].startswith("@"):
            keyword = words[0].lower()
            if keyword == "@reboot":
                if skipped is None:
                    raise _line_error(number, REBOOT_REASON + " instead (or skip such lines: --skip-unsupported)")
                skipped.append(SkippedLine(number, stripped, REBOOT_REASON))
                continue
            if keyword not in KEYWORDS:
                raise _line_error(number, f"unknown keyword '{words[0]}'; classic cron knows "
                                          + ", ".join(KEYWORDS) + " and @reboot")
            schedule, fields, width = words[0], KEYWORDS[keyword], 1
        else:
            if len(words) < 6:
                raise _line_error(number, "expected five time fields and a command "
                                          "(minute hour day-of-month month day-of-week command)")
            schedule = fields = " ".join(words[:5])
            width = 5
        if len(words) <= width:
            raise _line_error(number, "has no command after the time fields")
        _classic_fields(fields, number)
        rest = stripped
        for _ in range(width):
            rest = rest.split(None, 1)[1]
        command, stdin = split_command(rest)
        if not command.strip():
            raise _line_error(number, "has no command before the first %")
        normal = " ".join(stripped.split())
        entries.append(CrontabEntry(
            line=number, text=raw, schedule=schedule, fields=fields, command=command.strip(), stdin=stdin,
            env=dict(env), shell=shell, mailto=mailto, tz=tz, tz_variable=tz_variable, repeat=seen[normal]))
        seen[normal] += 1
    return entries


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
        return cls(compiled, frozenset(compiled.minutes), frozenset(compiled.hours),
                   *(parts[i].startswith("*") for i in (0, 1, 2, 4)))

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


def classic_runs(entry: ClassicEntry, zone: ZoneInfo, start: datetime, end: datetime, *,
                 daemon_zone: ZoneInfo | None = None) -> list[ClassicRun]:
    """When classic cron (cronie, Vixie cron 4.1) runs ``entry`` from ``start`` to before ``end``.

    Without ``daemon_zone`` the daemon runs in ``zone``; with it, ``entry`` is a CRON_TZ=``zone``
    job on a daemon in ``daemon_zone`` (see the module docstring).
    """
    return list(simulate(entry, zone, start, end, daemon_zone=daemon_zone).runs)


def simulate(entry: ClassicEntry, zone: ZoneInfo, start: datetime, end: datetime, *,
             daemon_zone: ZoneInfo | None = None) -> Simulation:
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
            kind: Wakeup = ("large" if abs(ahead) > 180 else "medium" if ahead > 5 else "small" if ahead > 0
                            else "negative")
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
                find_jobs(virtual_time, False, True, old_gmtoff,
                          "on time" if virtual_time >= time_running else "catch-up")
                if virtual_time >= time_running:
                    break
        elif diff > 0:  # small: woke late, run every job for each minute missed
            while True:
                virtual_time += 1
                if virtual_time >= time_running:
                    old_gmtoff = gmtoff
                find_jobs(virtual_time, True, True, old_gmtoff,
                          "on time" if virtual_time >= time_running else "catch-up")
                if virtual_time >= time_running:
                    break
        else:  # negative: wildcard jobs only; virtual time waits for the clock
            find_jobs(time_running, True, False, gmtoff, "second pass")
    return Simulation(tuple(runs), tuple(jumps))


def kairos_occurrences(fields: str, zone: str, start: datetime, end: datetime,
                       dst: DstPolicy = DEFAULT_DST) -> list[Occurrence]:
    """Kairos's occurrences of the schedule with nominal time in [start, end), skipped ones included."""
    lo, hi = _minute_span(start, end)
    found = []
    schedule = CronSchedule(expr=fields, tz=zone, dst=dst)
    for occurrence in occurrences_after(schedule, _instant(lo) - timedelta(microseconds=1), JOB_KEY):
        if occurrence.nominal_utc >= _instant(hi):
            break
        found.append(occurrence)
    return found


# -- comparing -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Difference:
    """One way the two schedulers treat a time; ``differs`` False: a DST change both handle alike."""

    text: str
    classic: tuple[datetime, ...]  # UTC instants classic cron runs at
    kairos: tuple[datetime, ...]  # UTC instants Kairos runs at
    differs: bool


@dataclass(frozen=True)
class Comparison:
    zone: str
    classic: tuple[datetime, ...]
    kairos: tuple[datetime, ...]
    notes: tuple[Difference, ...] = field(default=())

    @property
    def identical(self) -> bool:
        return Counter(self.classic) == Counter(self.kairos)

    @property
    def differences(self) -> tuple[Difference, ...]:
        return tuple(n for n in self.notes if n.differs)


# cron.c's set_time re-reads GMToff only when tm_isdst flips: an offset change that keeps DST on
# (or off), such as Samoa's in 2011, leaves the daemon on the old offset.
_UNSEEN = "cron does not see this change: it re-reads the UTC offset only when DST begins or ends"


def _hhmm(wall: datetime) -> str:
    return wall.strftime("%H:%M")


def _local(instant: datetime, zone: ZoneInfo, day: date | None = None) -> str:
    moment = instant.astimezone(zone)
    text = moment.strftime("%H:%M %Z")
    return text if moment.date() == day else moment.strftime("%Y-%m-%d ") + text


def _walls(walls: Sequence[datetime]) -> str:
    if len(walls) > 4:
        return f"{_hhmm(walls[0])}-{_hhmm(walls[-1])} ({len(walls)} times)"
    return ", ".join(_hhmm(w) for w in walls)


def _times(instants: Sequence[datetime], zone: ZoneInfo) -> str:
    shown = ", ".join(_local(i, zone) for i in instants[:5])
    return shown + (f" and {len(instants) - 5} more" if len(instants) > 5 else "")


def _runs(n: int) -> str:
    return {0: "not at all", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _wall_minutes(lo: int, hi: int) -> range:
    return range(lo // 60, -(-hi // 60))


def compare(fields: str, zone_name: str, start: datetime, end: datetime, *, dst: DstPolicy = DEFAULT_DST,
            daemon_zone: ZoneInfo | None = None) -> Comparison:
    """Classic cron's runs of one line beside Kairos's occurrences over [start, end), explained."""
    zone = validate_tz(zone_name)
    entry = ClassicEntry.of(fields)
    simulation = simulate(entry, zone, start, end, daemon_zone=daemon_zone)
    classic = simulation.runs
    occurrences = kairos_occurrences(entry.cron.resolved, zone_name, start, end, dst)
    kairos = [o.nominal_utc for o in occurrences if not o.skipped]
    kairos_set = set(kairos)
    lo, hi = _minute_span(start, end)
    notes: list[Difference] = []
    covered: set[datetime] = set()
    cronie_tz = daemon_zone is not None

    def kairos_walls(a: int, b: int) -> list[datetime]:
        """Kairos's matching wall times in [a, b) (local seconds since the epoch, naive)."""
        first, last = _wall(a // 60), _wall(-(-b // 60))
        found = []
        for wall in entry.cron.walls_after(first - timedelta(microseconds=1)):
            if wall >= last:
                break
            found.append(wall)
        return found

    def classic_walls(a: int, b: int) -> list[datetime]:
        return [_wall(m) for m in _wall_minutes(a, b) if entry.matches_minute(m)]

    for at_s, before, after in _Offsets(zone, lo, hi).changes():
        if not lo <= at_s < hi:
            continue
        at = _instant(at_s)
        old_wall, new_wall = _wall((at_s + before) // 60), _wall((at_s + after) // 60)
        clocks = (f"{_hhmm(old_wall)} to {_hhmm(new_wall)}" if old_wall.date() == new_wall.date()
                  else f"{old_wall:%Y-%m-%d %H:%M} to {new_wall:%Y-%m-%d %H:%M}")
        if after > before:
            gap_c, gap_k = classic_walls(at_s + before, at_s + after), kairos_walls(at_s + before, at_s + after)
            if not gap_c and not gap_k:
                continue
            covered.add(at)
            walls = sorted(set(gap_c) | set(gap_k))
            one = len(walls) == 1
            c_at = [r for r in classic if r.at == at]
            k_at = [i for i in kairos if i == at]
            caught = [r for r in c_at if r.how == "catch-up"]
            there = _local(at, zone, walls[0].date())
            if caught:
                c_text = f"runs {'it' if one else 'them'} at {there} (time jump)"
            elif not gap_c:
                c_text = "does not match " + ("it" if one else "them")
            elif cronie_tz:
                c_text = (f"does not run {'it' if one else 'them'} (cronie does not catch up CRON_TZ jobs "
                          f"across a DST change)")
            elif (jump := simulation.jump_at(at)) is None:
                c_text = f"does not run {'it' if one else 'them'} ({_UNSEEN})"
            elif jump.wakeup == "large":
                c_text = f"does not run {'it' if one else 'them'} (a jump of 3 h or more is not caught up)"
            else:
                c_text = (f"does not run {'it' if one else 'them'} (a job with * in its minute or hour field "
                          "follows the new local time)")
            if not gap_k:
                k_text = "does not match " + ("it" if one else "them")
            elif dst.gap == "skip":
                k_text = f"skips {'it' if one else 'them'}"
            else:
                k_text = f"shifts {'it' if one else 'them'} to {_local(at, zone, walls[0].date())}"
            text = (f"{walls[0].date().isoformat()} {_walls(walls)} {zone_name} {'does' if one else 'do'} not exist "
                    f"(clocks go from {clocks}): classic cron {c_text}, Kairos {k_text}")
            if len(c_at) != len(k_at) or len(c_at) > 1:
                text += f"; at {there} classic cron runs {_runs(len(c_at))}, Kairos {_runs(len(k_at))}"
            notes.append(Difference(text, tuple(r.at for r in c_at), tuple(k_at), len(c_at) != len(k_at)))
        else:
            rep_c, rep_k = classic_walls(at_s + after, at_s + before), kairos_walls(at_s + after, at_s + before)
            groups: dict[tuple[tuple[bool, bool], tuple[bool, bool]], list[datetime]] = {}
            instants: dict[datetime, tuple[datetime, datetime]] = {}
            for wall in sorted(set(rep_c) | set(rep_k)):
                placed = place(wall, zone)
                pair = (placed.first, placed.second)
                instants[wall] = pair
                in_range = [i for i in pair if lo <= i.timestamp() < hi]
                if not in_range:
                    continue
                covered.update(in_range)
                c_flags = (any(r.at == pair[0] for r in classic), any(r.at == pair[1] for r in classic))
                k_flags = (pair[0] in kairos_set, pair[1] in kairos_set)
                groups.setdefault((c_flags, k_flags), []).append(wall)
            for (c_flags, k_flags), walls in groups.items():
                one = len(walls) == 1
                first, second = (i.astimezone(zone) for i in instants[walls[0]])
                names = ((f"{first:%H:%M %Z}", f"{second:%H:%M %Z}") if one
                         else (f"in {first:%Z}", f"in {second:%Z}"))

                def said(flags: tuple[bool, bool], names: tuple[str, str] = names, at: str = "at " if one else "",
                         ) -> str:
                    if all(flags):
                        return f"twice, {names[0]} and {names[1]}"
                    if flags[0] or flags[1]:
                        return f"once, {at}{names[0] if flags[0] else names[1]}"
                    return "not at all"

                if all(c_flags):
                    why = (" (cronie reads CRON_TZ jobs on each real minute)" if cronie_tz
                           else " (a job with * in its minute or hour field runs in both passes)" if entry.wildcard
                           else f" ({_UNSEEN})" if simulation.jump_at(at) is None
                           else " (the clock went back more than 3 h, so everything runs again)")
                elif c_flags[0] and not entry.wildcard and not cronie_tz:
                    why = " (a fixed-time job does not run again in the repeated hour)"
                else:
                    why = ""
                if all(k_flags):
                    k_why = " (a * hour field follows elapsed time)" if entry.cron.hour_is_wildcard \
                        else " (dst repeat: twice)"
                elif k_flags[0]:
                    k_why = " (dst repeat: once)"
                else:
                    k_why = ""
                text = (f"{walls[0].date().isoformat()} {_walls(walls)} {zone_name} "
                        f"{'occurs' if one else 'occur'} twice (clocks go back from {clocks}): "
                        f"classic cron runs {'it' if one else 'them'} "
                        f"{said(c_flags)}{why}, Kairos {said(k_flags)}{k_why}")
                c_inst = tuple(i for w in walls for i, f in zip(instants[w], c_flags, strict=True) if f)
                k_inst = tuple(i for w in walls for i, f in zip(instants[w], k_flags, strict=True) if f)
                notes.append(Difference(text, c_inst, k_inst, c_flags != k_flags))

    rest_c = Counter(r.at for r in classic if r.at not in covered)
    rest_k = Counter(i for i in kairos if i not in covered)
    only_c = sorted((rest_c - rest_k).elements())
    only_k = sorted((rest_k - rest_c).elements())
    if entry.day_rule_differs:
        why = (" (a day field starting with * makes classic cron require both day-of-month and day-of-week; "
               "Kairos runs on days matching either)")
    elif cronie_tz:
        why = " (cronie skips CRON_TZ jobs while the daemon's own zone changes its offset)"
    else:
        why = ""
    if only_c:
        notes.append(Difference(f"classic cron also runs at {_times(only_c, zone)}; Kairos does not{why}",
                                tuple(only_c), (), True))
    if only_k:
        notes.append(Difference(f"Kairos also runs at {_times(only_k, zone)}; classic cron does not{why}",
                                (), tuple(only_k), True))
    comparison = Comparison(zone_name, tuple(r.at for r in classic), tuple(kairos), tuple(notes))
    if not comparison.identical and not comparison.differences:
        notes.append(Difference("the two schedulers run at different times", comparison.classic, comparison.kairos,
                                True))
        comparison = Comparison(zone_name, comparison.classic, comparison.kairos, tuple(notes))
    return comparison
