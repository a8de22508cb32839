"""Cron schedules: the UTC instants a cron job fires at, across DST changes. Pure; ``now`` is a parameter.

Model
-----
A cron expression is matched against *wall-clock* time in the job's IANA zone, on naive local
datetimes, and every local match is then placed on the UTC time line by our own rules:

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

Modules, each depending only on those above it
----------------------------------------------
* :mod:`.cron`: the dialect: parsing, H tokens, field value sets, wall-time matching.
* :mod:`.zone`: zone placement: IANA zones, DST policy, a wall time on the UTC time line.
* :mod:`.timeline`: the occurrence timeline: next/after/preview and jitter.
* :mod:`.misfire`: misfire maths: counting missed occurrences and planning what runs.

Callers import from this package; the names below are its whole public surface.
"""

from app.domain.schedule.cron import CRON_FIELD, MAX_CRON_LENGTH, min_interval_s, validate_cron
from app.domain.schedule.misfire import MisfirePlan, missed_occurrences, plan_misfire
from app.domain.schedule.timeline import (
    CronSchedule,
    Occurrence,
    jitter_offset_s,
    next_occurrence,
    occurrences_after,
    preview,
)
from app.domain.schedule.zone import TZ_FIELD, UTC, DstPolicy, validate_tz

__all__ = [
    "CRON_FIELD",
    "MAX_CRON_LENGTH",
    "TZ_FIELD",
    "UTC",
    "CronSchedule",
    "DstPolicy",
    "MisfirePlan",
    "Occurrence",
    "jitter_offset_s",
    "min_interval_s",
    "missed_occurrences",
    "next_occurrence",
    "occurrences_after",
    "plan_misfire",
    "preview",
    "validate_cron",
    "validate_tz",
]
