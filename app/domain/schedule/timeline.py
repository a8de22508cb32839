"""The occurrence timeline: the instants a schedule fires at, in order, with jitter applied.

Wall-clock matches of the cron expression are placed on the UTC time line (:mod:`.zone`) and
turned into :class:`Occurrence` values whose ``nominal_utc`` strictly increases: a fall-back can
deliver wall times out of UTC order, and a spring-forward gap can land several wall times (and a
real occurrence) on one transition instant, which then count as ONE occurrence.

Fall back, fixed hour field (any hour field not starting with ``*``, including ``H``): fires once
at the first instance (``repeat="once"``) or at both (``repeat="twice"``). Wildcard hour field
(``*``, ``*/n``): follows elapsed time and fires in both copies of the repeated hour, each
with a note saying so.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from app.domain.schedule.cron import CompiledCron, compile_cron, stable_int
from app.domain.schedule.zone import DstPolicy, Placement, as_utc, gap_end, load_zone, place, wall_start
from app.errors import InvalidSchedule


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
    dst_note: str | None  # human text when a DST rule moved, dropped, deduplicated or repeated it
    reason: str | None  # "dst_gap" when skipped, else None


def jitter_offset_s(job_key: str, window_s: int) -> int:
    """This job's slot in the jitter window: stable across processes, 0 without a window."""
    if window_s < 0:
        raise InvalidSchedule("schedule.jitterSeconds", "must not be negative")
    if window_s == 0:
        return 0
    return stable_int("jitter", job_key) % window_s


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
class Timeline:
    """One job's schedule, compiled: its cron fields, zone, DST policy and jitter offset."""

    cron: CompiledCron
    zone: ZoneInfo
    dst: DstPolicy
    jitter: timedelta

    @classmethod
    def of(cls, schedule: CronSchedule, job_key: str) -> Timeline:
        return cls(
            cron=compile_cron(schedule.expr, job_key),
            # A stored schedule keeps its zone: new ones are checked by validate_tz at submit.
            zone=load_zone(schedule.tz),
            dst=schedule.dst,
            jitter=timedelta(seconds=jitter_offset_s(job_key, schedule.jitter_s)),
        )

    def occurrences(self, after: datetime) -> Iterator[Occurrence]:
        """Occurrences with nominal_utc > after, strictly increasing.

        Wall times arrive in local order, but their instants are not in UTC order around a
        fall-back (01:30 EST comes after 01:45 EDT), and several can land on one instant in a
        gap. So candidates wait in a small buffer keyed by instant, merged when they coincide,
        and leave it once no later wall time can produce an earlier or equal instant. That bound
        is the earlier reading of the latest wall time: both readings increase with the wall
        time, and a gap's transition instant lies after the fold=1 reading.
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

        for wall in self.cron.walls_after(wall_start(self.zone, after)):
            placement = place(wall, self.zone)
            if placement.kind == "single":
                if slot := at(placement.first):
                    slot.real = True
            elif placement.kind == "repeat":
                self._place_repeat(wall, placement, at)
            elif slot := at(gap_end(self.zone, placement)):
                slot.gap_walls.append(wall)
            horizon = min(placement.first, placement.second)
            while order and order[0] <= horizon:
                yield self._finish(pending.pop(heapq.heappop(order)))
        while order:
            yield self._finish(pending.pop(heapq.heappop(order)))

    def _place_repeat(self, wall: datetime, placement: Placement, at: Callable[[datetime], _Pending | None]) -> None:
        first_name = placement.first.astimezone(self.zone).tzname()
        second_name = placement.second.astimezone(self.zone).tzname()
        head = f"{_hhmm(wall)} occurs twice on {wall.date().isoformat()} (fall back)"
        if self.cron.hour_is_wildcard:
            # Elapsed-time semantics: the repeated hour is simply an hour that passes twice.
            note = f"{head}; a wildcard hour follows elapsed time and runs at both ({first_name}, then {second_name})"
            for instant in (placement.first, placement.second):
                if slot := at(instant):
                    slot.real = True
                    slot.repeat_note = note
            return
        if self.dst.repeat == "twice":
            note = f"{head}; runs at both ({first_name}, then {second_name})"
            instants: tuple[datetime, ...] = (placement.first, placement.second)
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


def occurrences_after(schedule: CronSchedule, after_utc: datetime, job_key: str) -> Iterator[Occurrence]:
    """Occurrences with nominal_utc strictly after ``after_utc`` (a nominal instant), forever.

    Strictly increasing nominal_utc; includes skipped ones (gap="skip") so callers can record
    them. Invalid schedules raise here, not on the first ``next()``.
    """
    timeline = Timeline.of(schedule, job_key)
    return timeline.occurrences(as_utc(after_utc, "after_utc"))


def next_occurrence(schedule: CronSchedule, after_utc: datetime, job_key: str) -> Occurrence:
    """The first occurrence that runs (not skipped) strictly after ``after_utc``.

    Raises StopIteration if the schedule never fires again (no match within 50 years;
    validation already refuses expressions that can never match).
    """
    return next(occ for occ in occurrences_after(schedule, after_utc, job_key) if not occ.skipped)


def preview(schedule: CronSchedule, from_utc: datetime, count: int, job_key: str = "preview") -> list[Occurrence]:
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
