-- Read-only figures for the dashboard, GET /v1/stats/* and GET /v1/status (app/store/stats.py).
-- Every statement is bounded: a time window (:window_s back from now, :horizon_s ahead) or only
-- live rows (ready, leased, dead), and LIMIT on what it returns. :tenant_id NULL means every
-- tenant (the operator's admin token); otherwise one tenant's rows only.
-- Occurrences in a window are read as ranges, never by walking history: settled ones from
-- executions_settled_by_tenant (tenant_id, scheduled_for), one range per tenant (the operator's view
-- reaches every tenant from tenants), live ones (ready, leased) from their partial indexes. The first
-- start of an occurrence is its started_at when it was leased once (an HTTP delivery's completion sets it
-- to when its request was sent); else its attempts' (primary key), coalesce(sent_at, leased_at).

-- name: StatsStartLagPerMinute
-- Per minute of scheduled_for in the last :window_s seconds: occurrences, how many started, start lag (first attempt's lease minus scheduled_for) and dispatch lag (dispatched_at minus scheduled_for) p50/p99 in milliseconds.
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), window_rows AS (
    -- Occurrences scheduled in the window, skipped ones left out (they never run): settled, one
    -- range per tenant; ready; leased (a CHECK ties lease_until to state 'leased').
    SELECT e.execution_id, e.scheduled_for, e.dispatched_at, e.started_at, e.attempt, e.state, e.ready_at
    FROM clock AS c
    JOIN tenants AS t ON CAST(:tenant_id AS UUID) IS NULL OR t.tenant_id = CAST(:tenant_id AS UUID)
    JOIN executions AS e ON e.tenant_id = t.tenant_id
        AND e.state IN ('succeeded', 'dead', 'cancelled')
        AND e.scheduled_for > c.now - CAST(:window_s AS FLOAT8) * INTERVAL '1 second'
        AND e.scheduled_for <= c.now
        AND e.trigger = 'schedule'  -- a manual run or a backfill is not late by its scheduled_for
    UNION ALL
    SELECT e.execution_id, e.scheduled_for, e.dispatched_at, e.started_at, e.attempt, e.state, e.ready_at
    FROM clock AS c
    JOIN executions AS e ON (e.state = 'ready' OR e.lease_until IS NOT NULL)
        AND (CAST(:tenant_id AS UUID) IS NULL OR e.tenant_id = CAST(:tenant_id AS UUID))
        AND e.scheduled_for > c.now - CAST(:window_s AS FLOAT8) * INTERVAL '1 second'
        AND e.scheduled_for <= c.now
        AND e.trigger = 'schedule'
), occurrences AS (
    SELECT date_trunc('minute', e.scheduled_for) AS minute,
           CAST(EXTRACT(EPOCH FROM e.dispatched_at - e.scheduled_for) AS FLOAT8) * 1000 AS dispatch_ms,
           CAST(EXTRACT(EPOCH FROM f.first_leased_at - e.scheduled_for) AS FLOAT8) * 1000 AS start_ms
    FROM clock AS c, window_rows AS e
    CROSS JOIN LATERAL (
        SELECT CASE WHEN e.attempt <= 1 THEN e.started_at  -- leased once (or never): the row says when
                    ELSE coalesce((SELECT min(coalesce(a.sent_at, a.leased_at)) FROM attempts AS a
                                   WHERE a.execution_id = e.execution_id),
                                  e.started_at) END AS first_leased_at  -- the live first attempt: the row's
    ) AS f
), dispatched AS (
    SELECT minute, count(*) AS occurrences,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY dispatch_ms) AS dispatch_p50_ms,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY dispatch_ms) AS dispatch_p99_ms
    FROM occurrences GROUP BY minute
), started AS (
    SELECT minute, count(*) AS started,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY start_ms) AS start_p50_ms,
           percentile_cont(0.99) WITHIN GROUP (ORDER BY start_ms) AS start_p99_ms
    FROM occurrences WHERE start_ms IS NOT NULL GROUP BY minute
)
SELECT d.minute, d.occurrences, coalesce(s.started, 0) AS started,
       s.start_p50_ms, s.start_p99_ms, d.dispatch_p50_ms, d.dispatch_p99_ms
FROM dispatched AS d
LEFT JOIN started AS s ON s.minute = d.minute
ORDER BY d.minute
LIMIT :limit;

-- name: StatsStartLagSummary
-- Over the last :window_s seconds as a whole: occurrences, how many started, start lag p50/p99 in milliseconds, and how long the oldest due occurrence that has not started yet has been waiting.
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), window_rows AS (
    -- Occurrences scheduled in the window, skipped ones left out (they never run): settled, one
    -- range per tenant; ready; leased (a CHECK ties lease_until to state 'leased').
    SELECT e.execution_id, e.scheduled_for, e.dispatched_at, e.started_at, e.attempt, e.state, e.ready_at
    FROM clock AS c
    JOIN tenants AS t ON CAST(:tenant_id AS UUID) IS NULL OR t.tenant_id = CAST(:tenant_id AS UUID)
    JOIN executions AS e ON e.tenant_id = t.tenant_id
        AND e.state IN ('succeeded', 'dead', 'cancelled')
        AND e.scheduled_for > c.now - CAST(:window_s AS FLOAT8) * INTERVAL '1 second'
        AND e.scheduled_for <= c.now
        AND e.trigger = 'schedule'  -- a manual run or a backfill is not late by its scheduled_for
    UNION ALL
    SELECT e.execution_id, e.scheduled_for, e.dispatched_at, e.started_at, e.attempt, e.state, e.ready_at
    FROM clock AS c
    JOIN executions AS e ON (e.state = 'ready' OR e.lease_until IS NOT NULL)
        AND (CAST(:tenant_id AS UUID) IS NULL OR e.tenant_id = CAST(:tenant_id AS UUID))
        AND e.scheduled_for > c.now - CAST(:window_s AS FLOAT8) * INTERVAL '1 second'
        AND e.scheduled_for <= c.now
        AND e.trigger = 'schedule'
), occurrences AS (
    SELECT CAST(EXTRACT(EPOCH FROM f.first_leased_at - e.scheduled_for) AS FLOAT8) * 1000 AS start_ms,
           CASE WHEN f.first_leased_at IS NULL AND e.state = 'ready' AND e.ready_at <= c.now
                THEN CAST(EXTRACT(EPOCH FROM c.now - e.scheduled_for) AS FLOAT8) * 1000 END AS waiting_ms
    FROM clock AS c, window_rows AS e
    CROSS JOIN LATERAL (
        SELECT CASE WHEN e.attempt <= 1 THEN e.started_at  -- leased once (or never): the row says when
                    ELSE coalesce((SELECT min(coalesce(a.sent_at, a.leased_at)) FROM attempts AS a
                                   WHERE a.execution_id = e.execution_id),
                                  e.started_at) END AS first_leased_at  -- the live first attempt: the row's
    ) AS f
)
SELECT (SELECT count(*) FROM occurrences) AS occurrences,
       s.started, s.start_p50_ms, s.start_p99_ms,
       (SELECT max(waiting_ms) FROM occurrences) AS oldest_waiting_ms
FROM (SELECT count(*) AS started,
             percentile_cont(0.5) WITHIN GROUP (ORDER BY start_ms) AS start_p50_ms,
             percentile_cont(0.99) WITHIN GROUP (ORDER BY start_ms) AS start_p99_ms
      FROM occurrences WHERE start_ms IS NOT NULL) AS s;

-- name: StatsOutcomesPerMinute
-- Per minute of scheduled_for in the last :window_s seconds: occurrences succeeded, dead, cancelled and still open, attempts retried (failed or lost and followed by another attempt, or waiting for one) and leases lost (expired, or a late result discarded).
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), window_rows AS (
    -- Occurrences scheduled in the window, skipped ones left out (they never run): settled, one
    -- range per tenant; ready; leased (a CHECK ties lease_until to state 'leased').
    SELECT e.execution_id, e.scheduled_for, e.dispatched_at, e.started_at, e.attempt, e.state, e.ready_at
    FROM clock AS c
    JOIN tenants AS t ON CAST(:tenant_id AS UUID) IS NULL OR t.tenant_id = CAST(:tenant_id AS UUID)
    JOIN executions AS e ON e.tenant_id = t.tenant_id
        AND e.state IN ('succeeded', 'dead', 'cancelled')
        AND e.scheduled_for > c.now - CAST(:window_s AS FLOAT8) * INTERVAL '1 second'
        AND e.scheduled_for <= c.now
    UNION ALL
    SELECT e.execution_id, e.scheduled_for, e.dispatched_at, e.started_at, e.attempt, e.state, e.ready_at
    FROM clock AS c
    JOIN executions AS e ON (e.state = 'ready' OR e.lease_until IS NOT NULL)
        AND (CAST(:tenant_id AS UUID) IS NULL OR e.tenant_id = CAST(:tenant_id AS UUID))
        AND e.scheduled_for > c.now - CAST(:window_s AS FLOAT8) * INTERVAL '1 second'
        AND e.scheduled_for <= c.now
), occurrences AS (
    SELECT date_trunc('minute', e.scheduled_for) AS minute, e.execution_id, e.state, e.attempt
    FROM window_rows AS e
), tries AS (
    -- Each occurrence's attempts through the attempts primary key, one probe each (as a plain join
    -- a custom plan estimated the window at a third of the tenant and hashed every attempt)
    SELECT o.minute, sum(x.retried) AS retried, sum(x.lease_lost) AS lease_lost
    FROM occurrences AS o
    CROSS JOIN LATERAL (
        SELECT sum(CASE WHEN a.outcome IN ('failed', 'expired', 'discarded')
                             AND (a.attempt < o.attempt OR o.state = 'ready') THEN 1 ELSE 0 END) AS retried,
               sum(CASE WHEN a.outcome IN ('expired', 'discarded') THEN 1 ELSE 0 END) AS lease_lost
        FROM attempts AS a WHERE a.execution_id = o.execution_id
    ) AS x
    -- settled at its first attempt: that attempt succeeded, nothing was retried or lost
    WHERE NOT (o.state = 'succeeded' AND o.attempt <= 1)
    GROUP BY o.minute
), finals AS (
    SELECT minute, count(*) AS occurrences,
           sum(CASE WHEN state = 'succeeded' THEN 1 ELSE 0 END) AS succeeded,
           sum(CASE WHEN state = 'dead' THEN 1 ELSE 0 END) AS dead,
           sum(CASE WHEN state = 'cancelled' THEN 1 ELSE 0 END) AS cancelled,
           sum(CASE WHEN state IN ('ready', 'leased') THEN 1 ELSE 0 END) AS open
    FROM occurrences GROUP BY minute
)
SELECT f.minute, f.occurrences, f.succeeded, f.dead, f.cancelled, f.open,
       coalesce(t.retried, 0) AS retried, coalesce(t.lease_lost, 0) AS lease_lost
FROM finals AS f
LEFT JOIN tries AS t ON t.minute = f.minute
ORDER BY f.minute
LIMIT :limit;

-- name: StatsQueueDepth
-- Ready (due now, or later: dispatched ahead or waiting for a retry) and leased executions per queue and tenant, from the partial indexes of live work (executions_ready, executions_leased_by_queue).
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), live AS (
    SELECT e.queue, e.tenant_id,
           CASE WHEN e.ready_at <= c.now THEN 1 ELSE 0 END AS ready_due,
           CASE WHEN e.ready_at > c.now THEN 1 ELSE 0 END AS ready_later,
           0 AS leased
    FROM executions AS e, clock AS c
    WHERE e.state = 'ready'
      AND (CAST(:tenant_id AS UUID) IS NULL OR e.tenant_id = CAST(:tenant_id AS UUID))
    UNION ALL
    SELECT e.queue, e.tenant_id, 0, 0, 1
    FROM executions AS e
    WHERE e.lease_until IS NOT NULL  -- leased (a CHECK ties lease_until to state 'leased')
      AND (CAST(:tenant_id AS UUID) IS NULL OR e.tenant_id = CAST(:tenant_id AS UUID))
)
SELECT l.queue, l.tenant_id, t.name AS tenant_name,
       sum(l.ready_due) AS ready_due, sum(l.ready_later) AS ready_later, sum(l.leased) AS leased
FROM live AS l
JOIN tenants AS t ON t.tenant_id = l.tenant_id
GROUP BY l.queue, l.tenant_id, t.name
ORDER BY sum(l.ready_due) + sum(l.leased) DESC, l.queue, t.name
LIMIT :limit;

-- name: StatsDeadLetterCount
-- Dead executions (dead letters), counted up to :cap + 1 from executions_dead so a flood costs a bounded scan.
SELECT count(*) AS n
FROM (SELECT 1 FROM executions
      WHERE state = 'dead'
        AND (CAST(:tenant_id AS UUID) IS NULL OR tenant_id = CAST(:tenant_id AS UUID))
      LIMIT CAST(:cap AS INT) + 1) AS dead;

-- name: StatsDueHistogram
-- Per minute of the next :horizon_s seconds: occurrences waiting in due_index, and executions already ready for later (dispatched ahead, or a retry waiting for its backoff). A tenant's due rows are one range of due_index_tenant_due (tenant_id, due_minute); the operator's, every tenant's, one range per shard of the primary key. Each branch runs only for its scope (a one-time filter on :tenant_id, so a generic plan holds both).
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), due_rows AS (
    SELECT d.due_minute
    FROM due_index AS d, clock AS c
    WHERE CAST(:tenant_id AS UUID) IS NOT NULL
      AND d.tenant_id = CAST(:tenant_id AS UUID)
      AND d.due_minute >= date_trunc('minute', c.now)
      AND d.due_minute < c.now + CAST(:horizon_s AS FLOAT8) * INTERVAL '1 second'
    UNION ALL
    SELECT d.due_minute
    FROM due_index AS d, clock AS c
    WHERE CAST(:tenant_id AS UUID) IS NULL
      AND d.shard_id = ANY(CAST(:shard_ids AS INT[]))
      AND d.due_minute >= date_trunc('minute', c.now)
      AND d.due_minute < c.now + CAST(:horizon_s AS FLOAT8) * INTERVAL '1 second'
), due AS (
    SELECT due_minute AS minute, count(*) AS due FROM due_rows GROUP BY due_minute
), later AS (
    SELECT date_trunc('minute', e.ready_at) AS minute,
           sum(CASE WHEN e.attempt = 0 THEN 1 ELSE 0 END) AS dispatched_ahead,
           sum(CASE WHEN e.attempt > 0 THEN 1 ELSE 0 END) AS retrying
    FROM executions AS e, clock AS c
    WHERE e.state = 'ready'
      AND e.ready_at > c.now
      AND e.ready_at < c.now + CAST(:horizon_s AS FLOAT8) * INTERVAL '1 second'
      AND (CAST(:tenant_id AS UUID) IS NULL OR e.tenant_id = CAST(:tenant_id AS UUID))
    GROUP BY date_trunc('minute', e.ready_at)
)
SELECT coalesce(d.minute, l.minute) AS minute, coalesce(d.due, 0) AS due,
       coalesce(l.dispatched_ahead, 0) AS dispatched_ahead, coalesce(l.retrying, 0) AS retrying
FROM due AS d
FULL OUTER JOIN later AS l ON l.minute = d.minute
ORDER BY coalesce(d.minute, l.minute)
LIMIT :limit;

-- name: StatsShardOwners
-- Shards per live owner by the database clock (an expired or released lease counts as unowned, owner NULL), and the latest expiry of each owner's leases.
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), held AS (
    SELECT CASE WHEN l.owner IS NOT NULL AND l.lease_until > c.now THEN l.owner END AS owner,
           CASE WHEN l.owner IS NOT NULL AND l.lease_until > c.now THEN l.lease_until END AS lease_until
    FROM shard_leases AS l, clock AS c
)
SELECT owner, count(*) AS shards, max(lease_until) AS lease_until
FROM held
GROUP BY owner
ORDER BY owner;

-- name: StatsGenericPlans
-- For the rest of this read transaction, a prepared statement runs its generic plan from its first execution (PostgreSQL; app.store.stats says why). Every statement of this catalogue is written so its generic plan is a range (tests/integration/test_read_plans.py checks both kinds of plan).
SELECT set_config('plan_cache_mode', 'force_generic_plan', true) AS plan_cache_mode;
