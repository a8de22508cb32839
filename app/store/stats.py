"""Read-only figures for the dashboard and ``kairos status`` (``sql/queries/stats.sql``).

Every method takes ``tenant_id``: one tenant's rows, or None for every tenant (the operator).
Times come from the database clock (``now``: None in production, a fixed instant in tests), so a
window means the same on every API replica. Latencies are milliseconds; a percentile over no
rows is None.

Start lag is the first attempt's lease (``min(attempts.leased_at)``) minus the occurrence's
``scheduled_for``; dispatch lag is ``dispatched_at`` minus ``scheduled_for`` (negative when the
scheduler dispatched ahead, as it does by ``KAIROS_DISPATCH_AHEAD_S``). ``scheduled_for`` is the
nominal time, before a cron job's jitter, so a job with ``jitterSeconds`` shows its jitter as lag.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from app.domain.shards import SHARD_COUNT
from app.store.arrays import plain
from app.store.queries import COCKROACH, q
from app.store.table import Table

# Bounds of what one call may ask for (the API validates against them and says so).
MAX_WINDOW_S = 24 * 3600
MAX_HORIZON_S = 24 * 3600
MAX_QUEUES = 500
# The dead-letter count of /v1/stats/queues and /v1/status stops here and says so (``capped``; the
# dashboard shows "10,000+"): an index-only range of executions_dead of at most this many entries on
# every refresh, however many dead letters a tenant has let pile up.
DEAD_LETTER_CAP = 10_000
_ALL_SHARDS = plain(range(SHARD_COUNT))


@dataclass(frozen=True)
class LagMinute:
    minute: datetime
    occurrences: int
    started: int
    start_p50_ms: float | None
    start_p99_ms: float | None
    dispatch_p50_ms: float | None
    dispatch_p99_ms: float | None


@dataclass(frozen=True)
class LagSummary:
    occurrences: int
    started: int
    start_p50_ms: float | None
    start_p99_ms: float | None
    oldest_waiting_ms: float | None  # the oldest due occurrence not started yet: a lower bound of its lag


@dataclass(frozen=True)
class OutcomeMinute:
    minute: datetime
    occurrences: int
    succeeded: int
    dead: int
    cancelled: int
    open: int  # ready or leased: not final yet
    retried: int  # attempts that failed or lost their lease and were (or will be) followed by another
    lease_lost: int


@dataclass(frozen=True)
class QueueDepth:
    queue: str  # '@http', 'tenant:<id>:<pool>' or 'shared:<pool>' (app.domain.queues)
    tenant_id: UUID
    tenant_name: str
    ready_due: int
    ready_later: int  # dispatched ahead of its due time, or a retry waiting for its backoff
    leased: int


@dataclass(frozen=True)
class DeadLetterCount:
    count: int
    capped: bool  # there are more than ``count``


@dataclass(frozen=True)
class DueMinute:
    minute: datetime
    due: int  # still in due_index
    dispatched_ahead: int  # already an execution, ready at its due time
    retrying: int


@dataclass(frozen=True)
class ShardOwner:
    owner: str | None  # None: the shards nobody holds a live lease on
    shards: int
    lease_until: datetime | None


def _nothing() -> None:
    pass


def _ms(value: Any) -> float | None:
    return None if value is None else float(value)


class Stats(Table):
    """The stats statements of one transaction."""

    async def plan_once(self) -> Callable[[], None]:
        """On PostgreSQL: each statement of this transaction is prepared at its first execution and runs
        its generic plan from then on, on this connection. Answers what gives the connection back its
        own prepare threshold, to call when the transaction ends (on CockroachDB, or where preparing is
        off, nothing is changed and it does nothing).

        Planning one of these statements reads the catalogue of every weekly partition of history and
        its indexes: 2 to 40 ms each on a loaded machine, more than running the plan. By default psycopg
        prepares a statement at its fifth use on a connection and PostgreSQL makes custom plans for its
        first five executions after that, so each pooled connection planned each figure ten times before
        it ran a cached plan: a dashboard's refresh on connections not yet warm waited for tens of
        plannings. Here it is one per connection and statement. The generic plans are the ones
        tests/integration/test_read_plans.py holds to ranges of indexes (runtime partition pruning)."""
        if self._conn.dialect.name == COCKROACH:
            return _nothing
        await self._conn.execute(q("StatsGenericPlans"))
        raw: Any = (await self._conn.get_raw_connection()).driver_connection
        before = raw.prepare_threshold
        if before is None:  # preparing is off on this connection (a pooler in between): left off
            return _nothing
        raw.prepare_threshold = 0

        def restore() -> None:  # an attribute of the driver's connection: works even on a broken one
            raw.prepare_threshold = before

        return restore

    async def start_lag_per_minute(
        self, tenant_id: UUID | None, window_s: float, now: datetime | None = None
    ) -> list[LagMinute]:
        rows = await self._conn.execute(
            q("StatsStartLagPerMinute"),
            {
                "tenant_id": tenant_id,
                "window_s": min(window_s, MAX_WINDOW_S),
                "now": now,
                "limit": MAX_WINDOW_S // 60 + 1,
            },
        )
        return [
            LagMinute(
                r.minute,
                int(r.occurrences),
                int(r.started),
                _ms(r.start_p50_ms),
                _ms(r.start_p99_ms),
                _ms(r.dispatch_p50_ms),
                _ms(r.dispatch_p99_ms),
            )
            for r in rows
        ]

    async def start_lag_summary(
        self, tenant_id: UUID | None, window_s: float, now: datetime | None = None
    ) -> LagSummary:
        row = (
            await self._conn.execute(
                q("StatsStartLagSummary"), {"tenant_id": tenant_id, "window_s": min(window_s, MAX_WINDOW_S), "now": now}
            )
        ).one()
        return LagSummary(
            int(row.occurrences),
            int(row.started),
            _ms(row.start_p50_ms),
            _ms(row.start_p99_ms),
            _ms(row.oldest_waiting_ms),
        )

    async def outcomes_per_minute(
        self, tenant_id: UUID | None, window_s: float, now: datetime | None = None
    ) -> list[OutcomeMinute]:
        rows = await self._conn.execute(
            q("StatsOutcomesPerMinute"),
            {
                "tenant_id": tenant_id,
                "window_s": min(window_s, MAX_WINDOW_S),
                "now": now,
                "limit": MAX_WINDOW_S // 60 + 1,
            },
        )
        return [
            OutcomeMinute(
                r.minute,
                int(r.occurrences),
                int(r.succeeded),
                int(r.dead),
                int(r.cancelled),
                int(r.open),
                int(r.retried),
                int(r.lease_lost),
            )
            for r in rows
        ]

    async def queue_depths(self, tenant_id: UUID | None, now: datetime | None = None) -> list[QueueDepth]:
        """Live work per (queue, tenant), deepest first, at most MAX_QUEUES rows."""
        rows = await self._conn.execute(q("StatsQueueDepth"), {"tenant_id": tenant_id, "now": now, "limit": MAX_QUEUES})
        return [
            QueueDepth(r.queue, r.tenant_id, r.tenant_name, int(r.ready_due), int(r.ready_later), int(r.leased))
            for r in rows
        ]

    async def dead_letters(self, tenant_id: UUID | None, cap: int = DEAD_LETTER_CAP) -> DeadLetterCount:
        rows = await self._conn.execute(q("StatsDeadLetterCount"), {"tenant_id": tenant_id, "cap": cap})
        n = int(rows.scalar_one())
        return DeadLetterCount(min(n, cap), n > cap)

    async def due_histogram(
        self, tenant_id: UUID | None, horizon_s: float, now: datetime | None = None
    ) -> list[DueMinute]:
        rows = await self._conn.execute(
            q("StatsDueHistogram"),
            {
                "tenant_id": tenant_id,
                "horizon_s": min(horizon_s, MAX_HORIZON_S),
                "now": now,
                "shard_ids": _ALL_SHARDS,
                "limit": MAX_HORIZON_S // 60 + 1,
            },
        )
        return [DueMinute(r.minute, int(r.due), int(r.dispatched_ahead), int(r.retrying)) for r in rows]

    async def shard_owners(self, now: datetime | None = None) -> list[ShardOwner]:
        rows = await self._conn.execute(q("StatsShardOwners"), {"now": now})
        return [ShardOwner(r.owner, int(r.shards), r.lease_until) for r in rows]
