"""Response bodies of /v1/stats and /v1/status (camelCase on the wire, as app.api.wire).

Latencies are milliseconds (None when nothing was measured); minutes are UTC instants at the
start of the minute.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from app.api.wire import Wire


class ScopeOut(Wire):
    """Whose figures these are: a tenant's (its key), or the operator's view of one or every tenant."""

    viewer: Literal["tenant", "admin"]
    tenant: str | None  # None: every tenant


class LagMinuteOut(Wire):
    minute: datetime
    occurrences: int
    started: int
    start_p50_ms: float | None
    start_p99_ms: float | None
    dispatch_p50_ms: float | None
    dispatch_p99_ms: float | None


class LagOut(Wire):
    """Start lag (first attempt's lease - scheduledFor) and dispatch lag (dispatchedAt - scheduledFor)
    per minute of scheduledFor; minutes with no occurrence are left out."""

    scope: ScopeOut
    window_start: datetime
    window_end: datetime
    minutes: list[LagMinuteOut]


class OutcomeMinuteOut(Wire):
    minute: datetime
    occurrences: int
    succeeded: int
    dead: int
    retried: int
    lease_lost: int
    cancelled: int
    open: int
    failure_rate: float | None  # (dead + retried) / (succeeded + dead + retried)


class OutcomesOut(Wire):
    """What became of the occurrences due in each minute."""

    scope: ScopeOut
    window_start: datetime
    window_end: datetime
    minutes: list[OutcomeMinuteOut]


class QueueOut(Wire):
    queue: str
    kind: Literal["http", "tenant", "shared"]
    pool: str  # the pool as jobs target it ('emails', 'shared/emails'; 'http' for the executor's HTTP deliveries)
    tenant: str
    ready_due: int
    ready_later: int
    leased: int


class DeadLettersOut(Wire):
    count: int
    capped: bool  # there are more than count


class QueuesOut(Wire):
    scope: ScopeOut
    queues: list[QueueOut]
    dead_letters: DeadLettersOut


class DueMinuteOut(Wire):
    minute: datetime
    due: int
    dispatched_ahead: int
    retrying: int


class DueOut(Wire):
    """The next hours per minute: occurrences in due_index plus work already dispatched ahead."""

    scope: ScopeOut
    start: datetime
    end: datetime
    minutes: list[DueMinuteOut]


class SchedulerOut(Wire):
    owner: str
    shards: int
    lease_until: datetime | None


class ShardsOut(Wire):
    total: int
    owned: int
    schedulers: int
    owners: list[SchedulerOut] | None  # the operator only; a tenant sees the counts


class LagSummaryOut(Wire):
    window_minutes: int
    occurrences: int
    started: int
    p50_ms: float | None
    p99_ms: float | None
    oldest_waiting_ms: float | None  # the oldest due occurrence not started yet


class StatusOut(Wire):
    """GET /v1/status, what `kairos status` shows."""

    scope: ScopeOut
    generated_at: datetime
    shards: ShardsOut
    start_lag: LagSummaryOut
    queues: list[QueueOut]
    dead_letters: DeadLettersOut


class TenantsOut(Wire):
    tenants: list[str]
