"""What the /v1/stats and /v1/status routes do: one read-only transaction each, scoped by the viewer.

A tenant sees its own rows; the operator sees every tenant's, or one tenant's (``?tenant=``), and
is the only one shown which scheduler holds which shards. Windows are validated here against the
bounds of app.store.stats, so a query never reads more than a day of history or of due_index.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta, timezone
from typing import Literal, TypeVar

from app import errors
from app.api.stats import schemas
from app.api.viewer import Viewer
from app.domain.queues import HTTP_QUEUE, is_shared, pool_of_queue
from app.domain.shards import SHARD_COUNT
from app.store import Database, Store
from app.store import stats as stats_store

T = TypeVar("T")
WINDOW_MINUTES_DEFAULT = 60
HORIZON_HOURS_DEFAULT = 6
STATUS_LAG_WINDOW_MINUTES = 5
MAX_WINDOW_MINUTES = stats_store.MAX_WINDOW_S // 60
MAX_HORIZON_HOURS = stats_store.MAX_HORIZON_S // 3600
# One snapshot for every statement of a read, and none of SERIALIZABLE's predicate tracking: a
# dashboard refreshing every few seconds must never make a writer's transaction retry.
READ_ISOLATION = "REPEATABLE READ"


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def window_minutes(value: int | None) -> int:
    minutes = WINDOW_MINUTES_DEFAULT if value is None else value
    if not 1 <= minutes <= MAX_WINDOW_MINUTES:
        raise errors.InvalidInput("minutes", f"must be an integer between 1 and {MAX_WINDOW_MINUTES}")
    return minutes


def horizon_hours(value: int | None) -> int:
    hours = HORIZON_HOURS_DEFAULT if value is None else value
    if not 1 <= hours <= MAX_HORIZON_HOURS:
        raise errors.InvalidInput("hours", f"must be an integer between 1 and {MAX_HORIZON_HOURS}")
    return hours


async def read(db: Database, work: Callable[[Store], Awaitable[T]]) -> T:
    """``work`` in one read-only transaction, each statement planned once per pooled connection
    (app.store.stats.Stats.plan_once)."""

    async def planned_once(tx: Store) -> T:
        restore = await tx.stats.plan_once()
        try:
            return await work(tx)
        finally:
            restore()

    return await db.read(planned_once, isolation=READ_ISOLATION)  # the read replica, or follower reads


def scope_out(viewer: Viewer) -> schemas.ScopeOut:
    return schemas.ScopeOut(viewer="admin" if viewer.admin else "tenant", tenant=viewer.tenant_name)


def failure_rate(m: stats_store.OutcomeMinute) -> float | None:
    settled = m.succeeded + m.dead + m.retried
    return None if settled == 0 else (m.dead + m.retried) / settled


def queue_out(q: stats_store.QueueDepth) -> schemas.QueueOut:
    """The pool behind a queue key (app.domain.queues): '@http', 'tenant:<id>:<pool>', 'shared:<pool>'."""
    kind: Literal["http", "tenant", "shared"]
    if q.queue == HTTP_QUEUE:
        kind, pool = "http", "http"
    else:
        kind, pool = ("shared" if is_shared(q.queue) else "tenant"), pool_of_queue(q.queue)
    return schemas.QueueOut(q.queue, kind, pool, q.tenant_name, q.ready_due, q.ready_later, q.leased)


def dead_letters_out(d: stats_store.DeadLetterCount) -> schemas.DeadLettersOut:
    return schemas.DeadLettersOut(d.count, d.capped)


async def start_lag(db: Database, viewer: Viewer, minutes: int | None) -> schemas.LagOut:
    n = window_minutes(minutes)
    end = utcnow()
    rows = await read(db, lambda tx: tx.stats.start_lag_per_minute(viewer.tenant_id, n * 60.0))
    return schemas.LagOut(
        scope_out(viewer),
        end - timedelta(minutes=n),
        end,
        [
            schemas.LagMinuteOut(
                r.minute, r.occurrences, r.started, r.start_p50_ms, r.start_p99_ms, r.dispatch_p50_ms, r.dispatch_p99_ms
            )
            for r in rows
        ],
    )


async def outcomes(db: Database, viewer: Viewer, minutes: int | None) -> schemas.OutcomesOut:
    n = window_minutes(minutes)
    end = utcnow()
    rows = await read(db, lambda tx: tx.stats.outcomes_per_minute(viewer.tenant_id, n * 60.0))
    return schemas.OutcomesOut(
        scope_out(viewer),
        end - timedelta(minutes=n),
        end,
        [
            schemas.OutcomeMinuteOut(
                r.minute,
                r.occurrences,
                r.succeeded,
                r.dead,
                r.retried,
                r.lease_lost,
                r.cancelled,
                r.open,
                failure_rate(r),
            )
            for r in rows
        ],
    )


async def queues(db: Database, viewer: Viewer) -> schemas.QueuesOut:
    async def work(tx: Store) -> tuple[list[stats_store.QueueDepth], stats_store.DeadLetterCount]:
        return await tx.stats.queue_depths(viewer.tenant_id), await tx.stats.dead_letters(viewer.tenant_id)

    depths, dead = await read(db, work)
    return schemas.QueuesOut(scope_out(viewer), [queue_out(q) for q in depths], dead_letters_out(dead))


async def due(db: Database, viewer: Viewer, hours: int | None) -> schemas.DueOut:
    n = horizon_hours(hours)
    start = utcnow()
    rows = await read(db, lambda tx: tx.stats.due_histogram(viewer.tenant_id, n * 3600.0))
    return schemas.DueOut(
        scope_out(viewer),
        start,
        start + timedelta(hours=n),
        [schemas.DueMinuteOut(r.minute, r.due, r.dispatched_ahead, r.retrying) for r in rows],
    )


async def status(db: Database, viewer: Viewer) -> schemas.StatusOut:
    async def work(
        tx: Store,
    ) -> tuple[
        list[stats_store.ShardOwner], stats_store.LagSummary, list[stats_store.QueueDepth], stats_store.DeadLetterCount
    ]:
        return (
            await tx.stats.shard_owners(),
            await tx.stats.start_lag_summary(viewer.tenant_id, STATUS_LAG_WINDOW_MINUTES * 60.0),
            await tx.stats.queue_depths(viewer.tenant_id),
            await tx.stats.dead_letters(viewer.tenant_id),
        )

    owners, lag, depths, dead = await read(db, work)
    live = [o for o in owners if o.owner is not None]
    shards = schemas.ShardsOut(
        total=SHARD_COUNT,
        owned=sum(o.shards for o in live),
        schedulers=len(live),
        owners=[schemas.SchedulerOut(o.owner, o.shards, o.lease_until) for o in live if o.owner]
        if viewer.admin
        else None,
    )
    return schemas.StatusOut(
        scope=scope_out(viewer),
        generated_at=utcnow(),
        shards=shards,
        start_lag=schemas.LagSummaryOut(
            STATUS_LAG_WINDOW_MINUTES,
            lag.occurrences,
            lag.started,
            lag.start_p50_ms,
            lag.start_p99_ms,
            lag.oldest_waiting_ms,
        ),
        queues=[queue_out(q) for q in depths],
        dead_letters=dead_letters_out(dead),
    )


async def tenant_names(db: Database, viewer: Viewer) -> schemas.TenantsOut:
    if not viewer.admin:
        raise errors.Forbidden("only the operator's admin token lists tenants")
    return schemas.TenantsOut([t.name for t in await read(db, lambda tx: tx.tenants.list_all())])
