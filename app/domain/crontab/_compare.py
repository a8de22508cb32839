"""Classic cron's runs beside Kairos's occurrences, every difference explained (docs/crontab.md)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from app.domain.crontab._clock import (
    ClassicEntry,
    _instant,
    _minute_span,
    _Offsets,
    _wall,
    kairos_occurrences,
    simulate,
)
from app.domain.crontab._parse import DEFAULT_DST
from app.domain.schedule import DstPolicy, validate_tz
from app.domain.schedule.zone import place

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


def compare(
    fields: str,
    zone_name: str,
    start: datetime,
    end: datetime,
    *,
    dst: DstPolicy = DEFAULT_DST,
    daemon_zone: ZoneInfo | None = None,
) -> Comparison:
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
        clocks = (
            f"{_hhmm(old_wall)} to {_hhmm(new_wall)}"
            if old_wall.date() == new_wall.date()
            else f"{old_wall:%Y-%m-%d %H:%M} to {new_wall:%Y-%m-%d %H:%M}"
        )
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
                c_text = (
                    f"does not run {'it' if one else 'them'} (cronie does not catch up CRON_TZ jobs "
                    f"across a DST change)"
                )
            elif (jump := simulation.jump_at(at)) is None:
                c_text = f"does not run {'it' if one else 'them'} ({_UNSEEN})"
            elif jump.wakeup == "large":
                c_text = f"does not run {'it' if one else 'them'} (a jump of 3 h or more is not caught up)"
            else:
                c_text = (
                    f"does not run {'it' if one else 'them'} (a job with * in its minute or hour field "
                    "follows the new local time)"
                )
            if not gap_k:
                k_text = "does not match " + ("it" if one else "them")
            elif dst.gap == "skip":
                k_text = f"skips {'it' if one else 'them'}"
            else:
                k_text = f"shifts {'it' if one else 'them'} to {_local(at, zone, walls[0].date())}"
            text = (
                f"{walls[0].date().isoformat()} {_walls(walls)} {zone_name} {'does' if one else 'do'} not exist "
                f"(clocks go from {clocks}): classic cron {c_text}, Kairos {k_text}"
            )
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
                names = (f"{first:%H:%M %Z}", f"{second:%H:%M %Z}") if one else (f"in {first:%Z}", f"in {second:%Z}")

                def said(
                    flags: tuple[bool, bool],
                    names: tuple[str, str] = names,
                    at: str = "at " if one else "",
                ) -> str:
                    if all(flags):
                        return f"twice, {names[0]} and {names[1]}"
                    if flags[0] or flags[1]:
                        return f"once, {at}{names[0] if flags[0] else names[1]}"
                    return "not at all"

                if all(c_flags):
                    why = (
                        " (cronie reads CRON_TZ jobs on each real minute)"
                        if cronie_tz
                        else " (a job with * in its minute or hour field runs in both passes)"
                        if entry.wildcard
                        else f" ({_UNSEEN})"
                        if simulation.jump_at(at) is None
                        else " (the clock went back more than 3 h, so everything runs again)"
                    )
                elif c_flags[0] and not entry.wildcard and not cronie_tz:
                    why = " (a fixed-time job does not run again in the repeated hour)"
                else:
                    why = ""
                if all(k_flags):
                    k_why = (
                        " (a * hour field follows elapsed time)"
                        if entry.cron.hour_is_wildcard
                        else " (dst repeat: twice)"
                    )
                elif k_flags[0]:
                    k_why = " (dst repeat: once)"
                else:
                    k_why = ""
                text = (
                    f"{walls[0].date().isoformat()} {_walls(walls)} {zone_name} "
                    f"{'occurs' if one else 'occur'} twice (clocks go back from {clocks}): "
                    f"classic cron runs {'it' if one else 'them'} "
                    f"{said(c_flags)}{why}, Kairos {said(k_flags)}{k_why}"
                )
                c_inst = tuple(i for w in walls for i, f in zip(instants[w], c_flags, strict=True) if f)
                k_inst = tuple(i for w in walls for i, f in zip(instants[w], k_flags, strict=True) if f)
                notes.append(Difference(text, c_inst, k_inst, c_flags != k_flags))

    rest_c = Counter(r.at for r in classic if r.at not in covered)
    rest_k = Counter(i for i in kairos if i not in covered)
    only_c = sorted((rest_c - rest_k).elements())
    only_k = sorted((rest_k - rest_c).elements())
    if entry.day_rule_differs:
        why = (
            " (a day field starting with * makes classic cron require both day-of-month and day-of-week; "
            "Kairos runs on days matching either)"
        )
    elif cronie_tz:
        why = " (cronie skips CRON_TZ jobs while the daemon's own zone changes its offset)"
    else:
        why = ""
    if only_c:
        notes.append(
            Difference(
                f"classic cron also runs at {_times(only_c, zone)}; Kairos does not{why}", tuple(only_c), (), True
            )
        )
    if only_k:
        notes.append(
            Difference(
                f"Kairos also runs at {_times(only_k, zone)}; classic cron does not{why}", (), tuple(only_k), True
            )
        )
    comparison = Comparison(zone_name, tuple(r.at for r in classic), tuple(kairos), tuple(notes))
    if not comparison.identical and not comparison.differences:
        notes.append(
            Difference("the two schedulers run at different times", comparison.classic, comparison.kairos, True)
        )
        comparison = Comparison(zone_name, comparison.classic, comparison.kairos, tuple(notes))
    return comparison
