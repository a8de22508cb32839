"""Crontab files, and classic cron's clock next to Kairos's. Pure; the range is a parameter.

- :func:`parse_crontab` reads a user crontab as cronie does (``_parse``);
- :func:`classic_runs` and :func:`simulate` are a port of cronie's main loop, the runs classic cron
  would make over a range, DST and clock changes included (``_clock``);
- :func:`compare` sets those runs beside the Kairos schedule's occurrences and explains every
  difference (``_compare``).

How each works, with the cronie sources it follows: docs/crontab.md.
"""

from app.domain.crontab._clock import ClassicEntry, ClassicRun, ClockJump, Simulation, classic_runs, simulate
from app.domain.crontab._compare import Comparison, Difference, compare
from app.domain.crontab._parse import (
    DEFAULT_DST,
    JOB_KEY,
    MAX_RANGE,
    REBOOT_REASON,
    CrontabEntry,
    SkippedLine,
    job_body,
    parse_crontab,
    split_command,
)

__all__ = [
    "DEFAULT_DST",
    "JOB_KEY",
    "MAX_RANGE",
    "REBOOT_REASON",
    "ClassicEntry",
    "ClassicRun",
    "ClockJump",
    "Comparison",
    "CrontabEntry",
    "Difference",
    "Simulation",
    "SkippedLine",
    "classic_runs",
    "compare",
    "job_body",
    "parse_crontab",
    "simulate",
    "split_command",
]
