"""Job specifications: validation and first-occurrence maths. Pure; ``now`` is a parameter.

An HTTP target's method, headers and auth are validated by app.domain.http_target."""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal
from urllib.parse import urlsplit
from uuid import UUID

import msgspec

from app.domain import queues
from app.domain import schedule as schedule_rules
from app.domain.egress import EgressPolicy
from app.domain.http_target import HttpMethod
from app.domain.jsontext import compact_json

# Re-exported: a job's labels are validated with the rest of it.
from app.domain.labels import LABEL_KEY as LABEL_KEY  # noqa: PLC0414
from app.domain.labels import MAX_LABEL_VALUE_LEN as MAX_LABEL_VALUE_LEN  # noqa: PLC0414
from app.domain.labels import MAX_LABELS as MAX_LABELS  # noqa: PLC0414
from app.domain.labels import LabelSelector as LabelSelector  # noqa: PLC0414
from app.domain.labels import parse_label_selectors as parse_label_selectors  # noqa: PLC0414
from app.domain.labels import validate_labels as validate_labels  # noqa: PLC0414
from app.domain.queues import HTTP_QUEUE
from app.domain.schedule.interval import DAY_S, wall_day_occurrences
from app.errors import InvalidInput, InvalidSchedule, refuse_nul

MAX_NAME_LEN = 200
MAX_URL_LEN = 2048
MAX_ATTEMPTS = 100
MAX_BACKOFF_S = 7 * 86400
MAX_TIMEOUT_S = 86400
MAX_JITTER_S = 86400
MAX_DELAY_S = 10 * 366 * 86400
# A runAt this far in the past is almost surely a mistake (a wrong year, a wrong zone).
MAX_PAST_S = 86400
# The instants any field accepts: from the Unix epoch to the end of year 9999 in UTC (what Python's
# datetime and PostgreSQL's timestamptz both hold; "9999-12-31T23:59:59Z" is the usual "never").
EARLIEST_INSTANT = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST_INSTANT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)
# How deeply a payload's arrays and objects may nest: {"a": [1]} is 2 levels.
MAX_PAYLOAD_DEPTH = 64

Concurrency = Literal["allow", "forbid", "replace", "buffer_one"]
Misfire = Literal["run_once", "catch_up", "skip"]
DstGap = Literal["shift", "skip"]
DstRepeat = Literal["once", "twice"]
MAX_RETRY_DURATION_S = 30 * 86400
# maxRuns: the most occurrences a schedule may be limited to (a limit, not a count to reach).
MAX_RUNS = 1_000_000_000
# deleteAfterCompletionSeconds: at most a year and a day after the job finished.
MAX_DELETE_AFTER_S = 366 * 86400


class Target(msgspec.Struct, frozen=True):
    type: Literal["http", "queue"]
    ref: str


class RetryPolicy(msgspec.Struct, frozen=True):
    max_attempts: int = 5
    backoff_s: float = 10.0
    max_backoff_s: float | None = None

    @property
    def effective_max_backoff_s(self) -> float:
        return self.max_backoff_s if self.max_backoff_s is not None else max(self.backoff_s, 3600.0)


class OnceSchedule(msgspec.Struct, frozen=True):
    run_at: datetime


@dataclass(frozen=True)
class EverySchedule:
    """Every ``every_s`` seconds from ``anchor``: elapsed time in UTC (EventBridge's rate(), anchored),
    or with ``tz`` whole days at the anchor's wall-clock time in that zone, by the cron DST rules
    (app.domain.schedule.interval)."""

    every_s: int
    anchor: datetime
    jitter_s: int = 0
    first: datetime | None = None  # the first occurrence a new job runs (the anchor unless it is past)
    tz: str | None = None
    dst: schedule_rules.DstPolicy = field(default_factory=schedule_rules.DstPolicy)

    def occurrences_after(self, after: datetime) -> Iterator[schedule_rules.Occurrence]:
        """Occurrences strictly after ``after`` (no jitter), gap-skipped ones included (marked)."""
        if self.tz is not None:
            yield from wall_day_occurrences(self.anchor, self.every_s // DAY_S, self.tz, self.dst, after)
            return
        at = self.anchor if after < self.anchor else self._elapsed_after(after)
        step = timedelta(seconds=self.every_s)
        while True:
            yield schedule_rules.Occurrence(at, at, at, False, None, None)
            at += step

    def _elapsed_after(self, after: datetime) -> datetime:
        steps = int((after - self.anchor).total_seconds() // self.every_s) + 1
        return self.anchor + timedelta(seconds=steps * self.every_s)

    def next_after(self, after: datetime) -> datetime:
        """The first occurrence that runs strictly after ``after``."""
        if self.tz is None:
            return self.anchor if after < self.anchor else self._elapsed_after(after)
        return next(o.nominal_utc for o in self.occurrences_after(after) if not o.skipped)

    def skipped_before_first(self, now: datetime) -> tuple[schedule_rules.Occurrence, ...]:
        """The occurrences after ``now`` a DST gap dropped (gap: skip) before the first that runs: history
        records them, as it does a cron job's."""
        if self.tz is None or self.first is None:
            return ()
        out: list[schedule_rules.Occurrence] = []
        for o in self.occurrences_after(now):
            if o.nominal_utc >= self.first or len(out) > MAX_GAP_SKIPS:
                break
            if o.skipped:
                out.append(o)
        return tuple(out)

    def newest_at_or_before(self, at: datetime) -> datetime | None:
        """The newest occurrence that runs at or before ``at`` (None before the anchor)."""
        if at < self.anchor:
            return None
        if self.tz is None:
            return self._elapsed_after(at) - timedelta(seconds=self.every_s)
        back = at - timedelta(seconds=self.every_s + 2 * DAY_S)
        newest = None
        for o in self.occurrences_after(back):
            if o.nominal_utc > at:
                return newest
            if not o.skipped:
                newest = o.nominal_utc
        return newest  # pragma: no cover - the iteration is endless


# At most 9 digits a unit (9 digits of days is far past the limit; the count stays cheap to convert).
_DURATION = re.compile(r"^(?:(\d{1,9})d)?(?:(\d{1,9})h)?(?:(\d{1,9})m)?(?:(\d{1,9})s)?$")
MIN_EVERY_S = 10
MAX_EVERY_S = 366 * 86400


def parse_every(value: str, min_s: int = MIN_EVERY_S) -> int:
    """'15m', '1h30m', '90s', '1d' -> seconds; at least ``min_s`` (10 s or more), at most 366 days."""
    m = _DURATION.match(value.strip()) if isinstance(value, str) else None
    if not m or not any(m.groups()):
        shown = value if not isinstance(value, str) or len(value) <= 32 else value[:32] + "..."
        raise InvalidSchedule("schedule.every", f"{shown!r} is not a duration such as 90s, 15m, 1h30m or 1d")
    d, h, mi, se = (int(g) if g else 0 for g in m.groups())
    seconds = ((d * 24 + h) * 60 + mi) * 60 + se
    low = max(MIN_EVERY_S, min_s)
    if not low <= seconds <= MAX_EVERY_S:
        raise InvalidSchedule("schedule.every", f"must be between {format_every(low)} and 366 days")
    return seconds


def format_every(seconds: int) -> str:
    """The canonical spelling of an interval: 5400 -> '1h30m'."""
    out = ""
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            out += f"{seconds // size}{unit}"
            seconds %= size
    return out or "0s"


def every_schedule(
    value: str,
    jitter_s: int | None,
    start_at: datetime | None,
    now: datetime,
    min_interval_s: int = MIN_EVERY_S,
    *,
    tz: str | None = None,
    dst: schedule_rules.DstPolicy | None = None,
) -> EverySchedule:
    """An interval schedule; with ``tz`` (whole days only) it keeps the anchor's wall-clock time there."""
    window = jitter_s or 0
    if not 0 <= window <= MAX_JITTER_S:
        raise InvalidSchedule("schedule.jitterSeconds", f"must be between 0 and {MAX_JITTER_S}")
    every_s = parse_every(value, min_interval_s)
    if tz is None:
        if dst is not None:
            raise InvalidSchedule("schedule.dst", "applies to an every schedule with a tz only (whole days)")
    else:
        schedule_rules.validate_tz(tz)
        if every_s % DAY_S:
            raise InvalidSchedule(
                "schedule.tz",
                f"keeps wall-clock time for whole days (1d, 7d); every {format_every(every_s)} is elapsed "
                "time, the same in every zone: leave tz out",
            )
    policy = dst or schedule_rules.DstPolicy()
    if start_at is None:
        if tz is not None:
            # Anchored at the submit's wall-clock time, first run that time one interval later.
            grid = EverySchedule(every_s, now.replace(microsecond=0), window, None, tz, policy)
            return replace(grid, first=grid.next_after(grid.anchor))
        # Anchored at the submit, first run one interval later (rate(15 minutes) created now runs in 15 minutes).
        anchor = now.replace(microsecond=0) + timedelta(seconds=every_s)
        return EverySchedule(every_s, anchor, window, anchor)
    grid = EverySchedule(every_s, start_at, window, None, tz, policy)
    first = start_at if start_at >= now else grid.next_after(now)
    return replace(grid, first=first)


class Options(msgspec.Struct, frozen=True):
    """What a job carries besides its schedule: labels, bounds, dry run, retry deadline, HTTP shape."""

    labels: dict[str, str] = msgspec.field(default_factory=dict)
    start_at: datetime | None = None
    end_at: datetime | None = None
    dry_run: bool = False
    max_retry_duration_s: float | None = None
    http_method: HttpMethod = "POST"
    http_headers: dict[str, str] = msgspec.field(default_factory=dict)
    http_auth: dict[str, str] | None = None  # http_target.validate_auth's: {"type": "oidc"[, "audience": ...]}
    # How the job ends (docs/states.md, "Lifecycle options"): a dead-lettered scheduled occurrence
    # pauses it; the schedule completes after max_runs occurrences it started; a completed or
    # cancelled job is removed to the archive delete_after_s after its last execution finished.
    pause_on_failure: bool = False
    max_runs: int | None = None
    delete_after_s: int | None = None


class JobSpec(msgspec.Struct, frozen=True):
    """A validated job, ready to be stored."""

    job_id: UUID
    name: str
    target: Target
    payload: Any
    schedule: OnceSchedule | schedule_rules.CronSchedule | EverySchedule
    retry: RetryPolicy
    timeout_s: int
    concurrency: Concurrency = "allow"
    misfire: Misfire = "run_once"
    cron_resolved: str | None = None
    options: Options = msgspec.field(default_factory=Options)
    first: schedule_rules.Occurrence | None = None
    # Occurrences before the first that a DST rule dropped (gap: skip): history records them.
    skipped_before_first: tuple[schedule_rules.Occurrence, ...] = ()
    # The payload's compact JSON, as validation wrote it: the object store's size check and the insert
    # use it instead of encoding the payload twice more. None once the payload is kept by reference.
    payload_json: str | None = None

    @property
    def first_run_at(self) -> datetime:
        if isinstance(self.schedule, OnceSchedule):
            return self.schedule.run_at
        if isinstance(self.schedule, EverySchedule):
            return self.first_nominal_at + timedelta(
                seconds=schedule_rules.jitter_offset_s(str(self.job_id), self.schedule.jitter_s)
            )
        assert self.first is not None
        return self.first.run_at

    @property
    def first_nominal_at(self) -> datetime:
        if isinstance(self.schedule, OnceSchedule):
            return self.schedule.run_at
        if isinstance(self.schedule, EverySchedule):
            return self.schedule.first or self.schedule.anchor
        assert self.first is not None
        return self.first.nominal_utc


def parse_instant(value: str, field_name: str) -> datetime:
    """ISO 8601 with an explicit offset (Z or +hh:mm); a naive time is ambiguous and refused, and so
    is an instant outside EARLIEST_INSTANT..LATEST_INSTANT (``0001-01-01T00:00:00+23:59`` is not in
    any calendar Python or PostgreSQL keeps)."""
    try:
        parsed = datetime.fromisoformat(value.replace("z", "Z"))
    except (TypeError, ValueError):
        shown = value if len(value) <= 64 else value[:64] + "..."
        raise InvalidInput(field_name, f"{shown!r} is not an ISO 8601 instant such as 2026-10-16T09:00:00Z") from None
    if parsed.tzinfo is None or parsed.utcoffset() is None:
        raise InvalidInput(field_name, "needs an offset (Z or +hh:mm): a time without one is ambiguous")
    try:
        at = parsed.astimezone(timezone.utc)
    except OverflowError:
        at = None
    if at is None or not EARLIEST_INSTANT <= at <= LATEST_INSTANT:
        raise InvalidInput(
            field_name, f"must lie between {EARLIEST_INSTANT.isoformat()} and {LATEST_INSTANT.isoformat()}"
        )
    return at


def within_horizon(at: datetime, now: datetime, horizon_days: int, field_name: str) -> datetime:
    """``at``, unless it lies more than ``horizon_days`` after ``now`` (KAIROS_MAX_SCHEDULE_HORIZON_DAYS)."""
    if at > now + timedelta(days=horizon_days):
        raise InvalidInput(field_name, f"is more than {horizon_days} days away")
    return at


def json_depth(value: Any, limit: int) -> int:
    """How deeply ``value``'s arrays and objects nest, counted up to ``limit + 1`` (no recursion)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack and deepest <= limit:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        deepest = max(deepest, depth + 1)
        stack.extend((child, depth + 1) for child in children)
    return deepest


# \u0000 in JSON text that is an escape, not an escaped backslash followed by "u0000".
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def validate_name(name: str) -> str:
    if not name or not name.strip():
        raise InvalidInput("name", "must not be empty")
    refuse_nul(name, "name")
    if len(name) > MAX_NAME_LEN:
        raise InvalidInput("name", f"at most {MAX_NAME_LEN} characters")
    return name


def validate_target(kind: str, ref: str, egress: EgressPolicy | None = None) -> Target:
    """``egress``: the server's policy, which refuses a URL whose host is a private, loopback, link-local or
    metadata address (or Kairos's own port) at submit; names are checked when a delivery resolves them."""
    refuse_nul(ref, "target.ref")
    if kind == "http":
        if len(ref) > MAX_URL_LEN:
            raise InvalidInput("target.ref", f"URL longer than {MAX_URL_LEN} characters")
        try:
            parts = urlsplit(ref)
            port = parts.port
        except ValueError as exc:  # a bracket out of place, a port that is no number or out of range
            raise InvalidInput("target.ref", f"not a valid URL: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise InvalidInput("target.ref", "an http target needs an absolute http(s) URL")
        if parts.username or parts.password:
            raise InvalidInput("target.ref", "credentials in the URL are not allowed; use the signature header")
        if egress is not None:
            reason = egress.refused_literal(parts.hostname, port or (443 if parts.scheme == "https" else 80))
            if reason:
                raise InvalidInput(
                    "target.ref",
                    f"refused by the egress policy: {reason}; HTTP targets must be "
                    "public (an operator can allow addresses with "
                    "KAIROS_HTTP_EGRESS_ALLOW)",
                )
        return Target("http", ref)
    if kind == "queue":
        if queues.parse_pool_ref(ref) is None:
            raise InvalidInput("target.ref", queues.POOL_REF_HELP)
        return Target("queue", ref)
    raise InvalidInput("target.type", "must be 'http' or 'queue'")


def validate_payload(payload: Any, max_bytes: int) -> Any:
    payload_json(payload, max_bytes)
    return payload


def payload_json(payload: Any, max_bytes: int) -> str:
    """A valid payload's compact JSON text (what is stored and sent); raises InvalidInput("payload")."""
    if json_depth(payload, MAX_PAYLOAD_DEPTH) > MAX_PAYLOAD_DEPTH:
        raise InvalidInput("payload", f"nests more than {MAX_PAYLOAD_DEPTH} levels of arrays and objects")
    dumped = compact_json(payload)
    if _JSON_NUL.search(dumped):
        raise InvalidInput("payload", "must not contain the NUL character (U+0000) in a key or string")
    size = len(dumped.encode())
    if size > max_bytes:
        raise InvalidInput("payload", f"{size} bytes inline; the limit is {max_bytes}")
    return dumped


def validate_retry(max_attempts: int | None, backoff_s: float | None, max_backoff_s: float | None) -> RetryPolicy:
    policy = RetryPolicy(
        max_attempts=5 if max_attempts is None else max_attempts,
        backoff_s=10.0 if backoff_s is None else float(backoff_s),
        max_backoff_s=None if max_backoff_s is None else float(max_backoff_s),
    )
    if not 1 <= policy.max_attempts <= MAX_ATTEMPTS:
        raise InvalidInput("retry.maxAttempts", f"must be between 1 and {MAX_ATTEMPTS}")
    if not 0 <= policy.backoff_s <= MAX_BACKOFF_S:
        raise InvalidInput("retry.backoffSeconds", f"must be between 0 and {MAX_BACKOFF_S}")
    if policy.max_backoff_s is not None and not policy.backoff_s <= policy.max_backoff_s <= MAX_BACKOFF_S:
        raise InvalidInput("retry.maxBackoffSeconds", f"must be between backoffSeconds and {MAX_BACKOFF_S}")
    return policy


def validate_bounds(start_at: str | None, end_at: str | None) -> tuple[datetime | None, datetime | None]:
    start = parse_instant(start_at, "schedule.startAt") if start_at is not None else None
    end = parse_instant(end_at, "schedule.endAt") if end_at is not None else None
    if start is not None and end is not None and start >= end:
        raise InvalidInput("schedule.endAt", "must be after startAt")
    return start, end


def validate_lifecycle(recurring: bool, pause_on_failure: bool, max_runs: int | None) -> tuple[bool, int | None]:
    """pauseOnFailure and maxRuns shape a schedule: a one-off job, which runs once and is done, is
    refused either rather than given a setting that would never act."""
    if not recurring:
        if pause_on_failure:
            raise InvalidInput(
                "pauseOnFailure",
                "applies to recurring jobs (cron or every) only: a one-off job "
                "runs once, and its dead letter is its outcome",
            )
        if max_runs is not None:
            raise InvalidInput("maxRuns", "applies to recurring jobs (cron or every) only: a one-off job runs once")
    if max_runs is not None and not 1 <= max_runs <= MAX_RUNS:
        raise InvalidInput("maxRuns", f"must be between 1 and {MAX_RUNS}")
    return pause_on_failure, max_runs


def validate_retry_duration(value: float | None) -> float | None:
    if value is not None and not 0 < value <= MAX_RETRY_DURATION_S:
        raise InvalidInput("retry.maxRetryDurationSeconds", f"must be between 0 (exclusive) and {MAX_RETRY_DURATION_S}")
    return None if value is None else float(value)


def validate_timeout(timeout_s: int | None) -> int:
    value = 300 if timeout_s is None else timeout_s
    if not 1 <= value <= MAX_TIMEOUT_S:
        raise InvalidInput("timeoutSeconds", f"must be between 1 and {MAX_TIMEOUT_S}")
    return value


def once_schedule(run_at: str | None, delay_s: float | None, now: datetime, horizon_days: int) -> OnceSchedule:
    if run_at is not None:
        at = parse_instant(run_at, "schedule.runAt")
        if at < now - timedelta(seconds=MAX_PAST_S):
            raise InvalidInput("schedule.runAt", "is more than a day in the past")
    else:
        assert delay_s is not None
        if not 0 <= delay_s <= MAX_DELAY_S:
            raise InvalidInput("schedule.delaySeconds", f"must be between 0 and {MAX_DELAY_S}")
        at = now + timedelta(seconds=delay_s)
    return OnceSchedule(within_horizon(at, now, horizon_days, "schedule.runAt"))


def cron_schedule(
    expr: str,
    tz: str | None,
    jitter_s: int | None,
    gap: str | None,
    repeat: str | None,
    job_key: str,
    *,
    min_interval_s: int = 0,
) -> tuple[schedule_rules.CronSchedule, str]:
    if not tz:
        raise InvalidSchedule("schedule.tz", "a cron schedule needs an IANA time zone, e.g. Europe/London or UTC")
    schedule_rules.validate_tz(tz)
    resolved = validate_cron_interval(expr, job_key, min_interval_s)
    window = jitter_s or 0
    if not 0 <= window <= MAX_JITTER_S:
        raise InvalidSchedule("schedule.jitterSeconds", f"must be between 0 and {MAX_JITTER_S}")
    return schedule_rules.CronSchedule(expr=expr, tz=tz, jitter_s=window, dst=dst_policy(gap, repeat)), resolved


def validate_cron_interval(expr: str, job_key: str, min_interval_s: int) -> str:
    """``expr`` resolved (schedule_rules.validate_cron), refused when two of its fire times can come closer than
    ``min_interval_s`` (KAIROS_MIN_FIRE_INTERVAL_S; a five-field expression is never closer than 60 s)."""
    resolved = schedule_rules.validate_cron(expr, job_key)
    if min_interval_s > 60:
        shortest = schedule_rules.min_interval_s(expr, job_key)
        if shortest < min_interval_s:
            raise InvalidSchedule(
                schedule_rules.CRON_FIELD,
                f"fires {shortest} s apart at its closest; this server allows "
                f"no less than {min_interval_s} s between fire times",
            )
    return resolved


_DST_GAPS: dict[str, DstGap] = {"shift": "shift", "skip": "skip"}
_DST_REPEATS: dict[str, DstRepeat] = {"once": "once", "twice": "twice"}
_MISFIRES: dict[str, Misfire] = {"run_once": "run_once", "catch_up": "catch_up", "skip": "skip"}


def dst_policy(gap: str | None, repeat: str | None) -> schedule_rules.DstPolicy:
    """The DST policy named by a request or a stored row (None: the default of each)."""
    gap_policy = _DST_GAPS.get("shift" if gap is None else gap)
    if gap_policy is None:
        raise InvalidSchedule("schedule.dst.gap", "must be 'shift' or 'skip'")
    repeat_policy = _DST_REPEATS.get("once" if repeat is None else repeat)
    if repeat_policy is None:
        raise InvalidSchedule("schedule.dst.repeat", "must be 'once' or 'twice'")
    return schedule_rules.DstPolicy(gap=gap_policy, repeat=repeat_policy)


def misfire_policy(value: str) -> Misfire:
    """The misfire policy a stored row names."""
    policy = _MISFIRES.get(value)
    if policy is None:
        raise InvalidSchedule("misfire", "must be 'run_once', 'catch_up' or 'skip'")
    return policy


def stored_schedule(
    expr: str,
    tz: str,
    jitter_s: int | None,
    gap: str | None,
    repeat: str | None,
) -> schedule_rules.CronSchedule:
    """The schedule a stored job row evaluates: its resolved expression (no H tokens), zone,
    jitter window and DST policy, as the jobs and dispatch rows hold them."""
    return schedule_rules.CronSchedule(expr=expr, tz=tz, jitter_s=jitter_s or 0, dst=dst_policy(gap, repeat))


def stored_every(
    every_s: int, anchor: datetime, jitter_s: int | None, tz: str | None, gap: str | None, repeat: str | None
) -> EverySchedule:
    """The interval schedule a stored every job evaluates (its zone and DST policy only with a tz)."""
    policy = dst_policy(gap, repeat) if tz is not None else schedule_rules.DstPolicy()
    return EverySchedule(every_s, anchor, jitter_s or 0, None, tz, policy)


def resolved_schedule(s: schedule_rules.CronSchedule, resolved: str) -> schedule_rules.CronSchedule:
    """The schedule with H tokens already replaced (what the scheduler evaluates)."""
    return schedule_rules.CronSchedule(expr=resolved, tz=s.tz, jitter_s=s.jitter_s, dst=s.dst)


# A schedule whose every occurrence falls in DST gaps would otherwise be searched forever.
MAX_GAP_SKIPS = 16


def first_occurrence(
    s: schedule_rules.CronSchedule, resolved: str, now: datetime, job_key: str, horizon_days: int
) -> tuple[schedule_rules.Occurrence, tuple[schedule_rules.Occurrence, ...]]:
    """The first occurrence that runs, and the DST-gap skips before it (recorded as skipped)."""
    skipped: list[schedule_rules.Occurrence] = []
    first = None
    for occ in schedule_rules.occurrences_after(resolved_schedule(s, resolved), now, job_key):
        if occ.nominal_utc > now + timedelta(days=horizon_days) or len(skipped) > MAX_GAP_SKIPS:
            break
        if not occ.skipped:
            first = occ
            break
        skipped.append(occ)
    if first is None:
        raise InvalidSchedule("schedule.cron", f"never fires within {horizon_days} days")
    return first, tuple(skipped)


def request_fingerprint(body: bytes) -> str:
    """Idempotency: the same key must come with the same body (compared canonically)."""
    try:
        return value_fingerprint(json.loads(body))
    except ValueError:
        return hashlib.sha256(body).hexdigest()


def value_fingerprint(value: Any) -> str:
    """The fingerprint of an already decoded body (a batch item): equal to request_fingerprint of its JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@functools.lru_cache(maxsize=4096)
def queue_for(target: Target, tenant_id: UUID) -> str:
    """The ready-queue key executions of this target go to: the ref alone decides (app.domain.queues).

    Cached: a batch's jobs mostly share a target, and every submit asks."""
    if target.type == "http":
        return HTTP_QUEUE
    ref = queues.parse_pool_ref(target.ref)
    if ref is None:
        raise InvalidInput("target.ref", queues.POOL_REF_HELP)
    return queues.queue_of(ref, tenant_id)


def shared_pool_of(target: Target) -> str | None:
    """The shared pool a target names (``shared/<name>``), whose grant the submit must check; else None."""
    if target.type != "queue":
        return None
    ref = queues.parse_pool_ref(target.ref)
    return ref.name if ref is not None and ref.shared else None
