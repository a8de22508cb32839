-- name: ExecutionListForJob
-- A page of one job's executions, newest occurrence first; keyset cursor on scheduled_for (unique within a job, so UNIQUE (job_id, scheduled_for) serves the page read backwards).
SELECT execution_id, scheduled_for, attempt, state, started_at, finished_at, error, skip_reason, trigger,
       dispatched_at, traceparent,
       -- An HTTP delivery started when its request was sent (sent_at); a worker's attempt when it was leased.
       coalesce((SELECT min(coalesce(a.sent_at, a.leased_at)) FROM attempts AS a
                 WHERE a.execution_id = executions.execution_id),
                started_at) AS first_started_at  -- no ended attempt yet: the live one is the first
FROM executions
WHERE job_id = :job_id AND tenant_id = :tenant_id
  AND (CAST(:before_scheduled AS TIMESTAMPTZ) IS NULL OR scheduled_for < CAST(:before_scheduled AS TIMESTAMPTZ))
ORDER BY scheduled_for DESC
LIMIT :limit;

-- name: ExecutionCountsForJob
-- How many of one job's executions are in each state.
SELECT state, count(*) AS n FROM executions
WHERE job_id = :job_id AND tenant_id = :tenant_id
GROUP BY state;

-- name: ExecutionCountsForJobNewest
-- How many of one job's newest :newest executions are in each state (GET /v1/jobs/{id}): its history index newest first, each week's in turn, stopping after :newest rows, however long the job's retained history.
SELECT newest.state, count(*) AS n
FROM (SELECT e.state FROM executions AS e
      WHERE e.job_id = :job_id AND e.tenant_id = :tenant_id
      ORDER BY e.scheduled_for DESC
      LIMIT :newest) AS newest
GROUP BY newest.state;

-- name: ExecutionInsertForJob
-- Occurrences a tenant asked for outside the schedule (POST :run, :backfill): ready at their ready_ats, or recorded as skipped (a dry-run job); an occurrence that already has an execution is left alone.
INSERT INTO executions (job_id, tenant_id, queue, scheduled_for, max_attempts, state, ready_at, finished_at,
                        skip_reason, error, trigger, traceparent)
SELECT CAST(:job_id AS UUID), CAST(:tenant_id AS UUID), CAST(:queue AS TEXT), i.scheduled_for,
       CAST(:max_attempts AS INT), CAST(:state AS TEXT), i.ready_at,
       CASE WHEN CAST(:state AS TEXT) = 'skipped' THEN now() END, CAST(:skip_reason AS TEXT),
       CAST(:note AS TEXT), CAST(:trigger AS TEXT), i.traceparent
FROM unnest(CAST(:scheduled_fors AS TIMESTAMPTZ[]), CAST(:ready_ats AS TIMESTAMPTZ[]), CAST(:traceparents AS TEXT[]))
    AS i (scheduled_for, ready_at, traceparent)
ON CONFLICT (job_id, scheduled_for) DO NOTHING
RETURNING execution_id, scheduled_for;

-- name: ExecutionCancelUnstartedForJob
-- Cancel a job's executions that no worker holds yet (job deleted).
UPDATE executions SET state = 'cancelled', finished_at = now(), error = 'job cancelled'
WHERE job_id = :job_id AND tenant_id = :tenant_id
  AND state = 'ready'  -- started (leased) work finishes; its result is still recorded
RETURNING execution_id;

-- name: ExecutionWithdrawAheadForJob
-- Take back a job's scheduled executions dispatched ahead of their due time and never leased (a pause wins over dispatch ahead); their nominal times. Manual runs and backfills (paced, so also ready later) are the tenant's explicit requests and stay.
DELETE FROM executions
WHERE job_id = :job_id AND tenant_id = :tenant_id
  AND state = 'ready' AND attempt = 0  -- never leased: nothing ran, nothing to keep
  AND trigger = 'schedule'  -- a backfill's past nominal times are not occurrences the pause made us miss
  AND ready_at > coalesce(CAST(:now AS TIMESTAMPTZ), now())
RETURNING scheduled_for;

-- name: ExecutionLeaseFair
-- Lease up to :limit ready executions of one queue, round-robin across tenants weighted by tenants.weight, each tenant capped at its max_inflight leased in this queue, skipping the tenants in :skip_tenants (the HTTP pool's: those whose leased deliveries already wait for a slot in the leasing executor, so their backlog stays in the queue instead of holding leases; empty for workers); bumps attempt (the fencing token). The live attempt is the executions row itself (lease_owner, started_at, lease_until): its attempts row is written once, when it ends.
WITH RECURSIVE ready_tenants (tenant_id) AS (
    -- Loose index scan over executions_ready: one probe per tenant, however deep its backlog.
    (SELECT tenant_id FROM executions
     WHERE queue = :queue AND state = 'ready'
     ORDER BY tenant_id LIMIT 1)
    UNION ALL
    SELECT (SELECT e.tenant_id FROM executions AS e
            WHERE e.queue = :queue AND e.state = 'ready' AND e.tenant_id > r.tenant_id
            ORDER BY e.tenant_id LIMIT 1)
    FROM ready_tenants AS r
    WHERE r.tenant_id IS NOT NULL
), quota AS (
    SELECT t.tenant_id, t.weight, coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now,
           t.max_inflight - l.leased AS room
    FROM ready_tenants AS r
    JOIN tenants AS t ON t.tenant_id = r.tenant_id
    -- The tenant's leased rows (executions_leased_by_queue), counted once: as a subquery of the select
    -- list, each use of room below (the filter and the LIMIT) ran it again, and through a herd's drain
    -- this count visits about a thousand rows, live and recently finished (docs/performance.md, "Lease").
    CROSS JOIN LATERAL (SELECT count(*) AS leased FROM executions AS x
                        WHERE x.queue = :queue AND x.tenant_id = t.tenant_id AND x.lease_until IS NOT NULL) AS l
    WHERE NOT (r.tenant_id = ANY (CAST(:skip_tenants AS UUID[])))  -- their deliveries wait here already
), share AS (
    -- Rounds of the round-robin that :limit can fill when every tenant has work: no tenant can
    -- be picked more than weight * rounds times, so locking more of its rows only costs.
    SELECT q.*, q.weight * CAST(ceil(CAST(:limit AS FLOAT8) / sum(q.weight) OVER ()) AS INT) AS most
    FROM quota AS q
    WHERE q.room > 0
), candidates AS (
    SELECT c.execution_id, c.attempt, c.scheduled_for, q.tenant_id, q.weight,
           row_number() OVER (PARTITION BY q.tenant_id ORDER BY c.ready_at, c.scheduled_for, c.execution_id) AS turn
    FROM share AS q
    CROSS JOIN LATERAL (
        SELECT e.execution_id, e.attempt, e.ready_at, e.scheduled_for FROM executions AS e
        WHERE e.queue = :queue AND e.tenant_id = q.tenant_id
          AND e.state = 'ready' AND e.ready_at <= q.now
        ORDER BY e.ready_at
        LIMIT least(q.room, q.most, CAST(:limit AS INT))  -- room > 0: a lowered quota leases nothing
        FOR UPDATE SKIP LOCKED
    ) AS c
), picked AS (
    -- Round r holds each tenant's turns r*weight+1 .. (r+1)*weight; tenants take turns in an
    -- order that rotates per call (:salt), so no tenant is always first.
    SELECT execution_id, attempt, scheduled_for FROM candidates
    ORDER BY (turn - 1) / weight, md5(CAST(tenant_id AS TEXT) || CAST(:salt AS TEXT)), turn
    LIMIT CAST(:limit AS INT)
), leased AS (
    -- The picked rows come in as arrays (aligned by the same ORDER BY), so the generic plan sees an
    -- array of about 10 items, whatever the statistics, and probes executions by primary key once per
    -- item. Joined to picked itself, the plan depended on estimates: with a tenants table never
    -- analyzed it scanned every ready row (75 us of PostgreSQL's CPU per leased row against 21), and
    -- with executions never analyzed it read the whole ready index into a bitmap and scanned picked
    -- once per row (13.9 ms for 128 rows of 60,000 against 4.8; docs/performance.md, "Lease").
    UPDATE executions AS e SET
        state = 'leased',
        attempt = e.attempt + 1,
        lease_owner = :worker_id,
        started_at = c.now,
        lease_until = c.now + least(CAST(:lease_s AS FLOAT8), CAST(j.timeout_s AS FLOAT8)) * INTERVAL '1 second'
    FROM unnest(ARRAY(SELECT execution_id FROM picked ORDER BY execution_id),
                ARRAY(SELECT attempt FROM picked ORDER BY execution_id),
                ARRAY(SELECT scheduled_for FROM picked ORDER BY execution_id)) AS p (execution_id, attempt, scheduled_for),
         jobs AS j, (SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now) AS c
    -- scheduled_for, the partition key: each row is looked for in its own weekly partition (pruned per
    -- row at run time), not in every one (docs/database-at-scale.md, "Finding a row by its id").
    WHERE e.execution_id = p.execution_id AND e.scheduled_for = p.scheduled_for AND j.job_id = e.job_id
      -- A concurrent lease of the same row changes nothing. 'ready' comes from a subquery so that the
      -- planner cannot read these rows from the partial indexes on state = 'ready' instead.
      AND e.state = (SELECT 'ready') AND e.attempt = p.attempt
    RETURNING e.execution_id, e.job_id, e.tenant_id, e.attempt, e.max_attempts, e.scheduled_for,
              e.lease_until, e.payload, e.traceparent, e.trigger, e.ready_at
), signer AS (
    -- The key that signs identity tokens now (read only for a row whose job asks for one).
    SELECT k.key_id, k.private_key FROM oidc_keys AS k
    WHERE k.signs_from <= coalesce(CAST(:now AS TIMESTAMPTZ), now())
    ORDER BY k.signs_from DESC, k.key_id LIMIT 1
)
-- The ids as text: what the executor hands on (gRPC, HTTP headers, log lines) and keys its leases by.
SELECT CAST(l.execution_id AS TEXT) AS execution_id, CAST(l.job_id AS TEXT) AS job_id,
       CAST(l.tenant_id AS TEXT) AS tenant_id, l.attempt, l.max_attempts, l.scheduled_for, l.lease_until,
       coalesce(l.payload, j.payload) AS payload, j.target_type, j.target_ref, j.timeout_s,
       t.signing_secret, j.http_method, j.http_headers, l.traceparent,
       -- A job payload kept in the object store (NULL above): the lease's caller reads it (app.store.payloads).
       CASE WHEN l.payload IS NULL THEN j.payload_ref END AS payload_ref,
       l.trigger,  -- schedule, manual or backfill: only scheduled occurrences count in start lag
       j.http_auth,  -- an HTTP target's auth object: the identity token it asks for (docs/http-delivery.md)
       -- The key that signs that token now: its id and sealed private half (app/store/oidc_keys.py; the
       -- latest signs_from not in the future: a rotation's new key is published before it signs).
       CASE WHEN j.http_auth IS NOT NULL THEN (SELECT key_id FROM signer) END AS oidc_key_id,
       CASE WHEN j.http_auth IS NOT NULL THEN (SELECT private_key FROM signer) END AS oidc_key
FROM leased AS l
-- In the order picked (fairness, then ready_at, a job's occurrences in scheduled order: a backfill's several
-- due at one lease are handed out oldest first), which the joins do not keep (on partitioned history
-- it came back in another): the caller spends its answer's byte budget in this order.
JOIN unnest(ARRAY(SELECT p.execution_id FROM picked AS p)) WITH ORDINALITY AS o (execution_id, ord)
  ON o.execution_id = l.execution_id
JOIN jobs AS j ON j.job_id = l.job_id
JOIN tenants AS t ON t.tenant_id = l.tenant_id
ORDER BY o.ord;

-- name: ExecutionNextReadyIn
-- Seconds until the earliest ready execution of a queue falls due (<= 0: due now), NULL when none is ready (one probe of executions_ready_at).
SELECT CAST(EXTRACT(EPOCH FROM min(ready_at) - coalesce(CAST(:now AS TIMESTAMPTZ), now())) AS FLOAT8) AS seconds
FROM executions
WHERE queue = :queue AND state = 'ready';

-- name: ExecutionHeartbeat
-- Extend the lease of the current attempt to now + :lease_s, never past started_at + the job's timeout (the live attempt is the executions row: no attempts row to mirror). :scheduled_for, when the caller knows it, finds the row in its own weekly partition (NULL: in every one).
UPDATE executions AS e SET
    lease_until = least(c.now + CAST(:lease_s AS FLOAT8) * INTERVAL '1 second',
                        e.started_at + CAST(j.timeout_s AS FLOAT8) * INTERVAL '1 second')
FROM jobs AS j, (SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now) AS c
WHERE e.execution_id = :execution_id AND j.job_id = e.job_id
  AND e.scheduled_for >= coalesce(CAST(:scheduled_for AS TIMESTAMPTZ), '-infinity')
  AND e.scheduled_for <= coalesce(CAST(:scheduled_for AS TIMESTAMPTZ), 'infinity')
  AND e.state = 'leased' AND e.attempt = :attempt  -- a stale attempt changes nothing
  AND e.started_at + CAST(j.timeout_s AS FLOAT8) * INTERVAL '1 second' > c.now  -- timed out: no more extensions
  AND (CAST(:scope AS TEXT) IS NULL OR e.queue = CAST(:scope AS TEXT)
       OR (right(CAST(:scope AS TEXT), 1) = ':' AND left(e.queue, length(CAST(:scope AS TEXT))) = CAST(:scope AS TEXT)))
RETURNING e.lease_until;

-- name: ExecutionCompleteMany
-- Record success of many current attempts at once (unnest over arrays), writing each attempt's row as it ends; a stale attempt changes nothing and its result is kept on its (expired or cancelled) attempts row as 'discarded'. Rows out: each recorded execution (ok), and each stale one, ok when its attempt had already succeeded (a repeated call); an execution out of scope, unknown, or changed by a concurrent statement is missing (lease lost).
-- No two CTEs are joined: a prepared statement's generic plan counts an array parameter as 10 items and joins CTEs by nested loop, quadratic in the batch (a 512-item call ran 34 ms against 7 ms; docs/performance.md, "Completion").
WITH input AS (
    -- Only executions the caller's credential covers: scope is an exact queue, a queue prefix ending in ':', or NULL (the executor itself).
    -- x is the row before this statement's update (one snapshot): the live attempt's owner and times.
    SELECT i.execution_id, i.attempt, i.result, i.sent_at, x.tenant_id, x.lease_owner, x.started_at, x.lease_until,
           x.state = 'leased' AND x.attempt = i.attempt AS current, x.scheduled_for
    FROM unnest(CAST(:execution_ids AS UUID[]), CAST(:attempts AS INT[]), CAST(:results AS TEXT[]),
                CAST(:scopes AS TEXT[]), CAST(:sent_ats AS TIMESTAMPTZ[]), CAST(:scheduled_fors AS TIMESTAMPTZ[]))
        AS i (execution_id, attempt, result, scope, sent_at, scheduled_for)
    -- The occurrence's time when the caller knows it (the executor remembers the leases it handed out):
    -- the row is looked for in its own weekly partition, not in every one; NULL: in every one.
    JOIN executions AS x ON x.execution_id = i.execution_id
        AND x.scheduled_for >= coalesce(i.scheduled_for, '-infinity') AND x.scheduled_for <= coalesce(i.scheduled_for, 'infinity')
    WHERE (i.scope IS NULL OR x.queue = i.scope OR (right(i.scope, 1) = ':' AND left(x.queue, length(i.scope)) = i.scope))
), clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), done AS (
    UPDATE executions AS e SET
        state = 'succeeded', finished_at = c.now, result = CAST(i.result AS JSONB), error = NULL,
        lease_owner = NULL, lease_until = NULL,
        started_at = coalesce(i.sent_at, e.started_at)  -- an HTTP delivery started when its request was sent
    FROM input AS i, clock AS c
    WHERE e.execution_id = i.execution_id AND e.scheduled_for = i.scheduled_for AND i.current
      AND e.state = 'leased' AND e.attempt = i.attempt  -- a stale attempt changes nothing
    -- What the attempt's row needs, the live attempt's owner and times as they were (input's).
    RETURNING e.execution_id, e.attempt, e.tenant_id, i.lease_owner, i.started_at, i.lease_until, c.now, e.result,
              i.sent_at, e.scheduled_for
), recorded AS (
    INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at,
                          outcome, result, sent_at, scheduled_for)
    SELECT d.execution_id, d.attempt, d.tenant_id, d.lease_owner, d.started_at, d.lease_until, d.now,
           'succeeded', d.result, d.sent_at, d.scheduled_for
    FROM done AS d
    -- A 'running' row opened at lease time (as Kairos did before 2026-12) ends here too.
    ON CONFLICT (execution_id, attempt, scheduled_for) DO UPDATE SET
        outcome = 'succeeded', finished_at = excluded.finished_at, result = excluded.result
    RETURNING execution_id
), discarded AS (
    UPDATE attempts AS a SET outcome = 'discarded', finished_at = coalesce(CAST(:now AS TIMESTAMPTZ), now()),
                             result = CAST(i.result AS JSONB)
    FROM input AS i
    WHERE a.execution_id = i.execution_id AND a.attempt = i.attempt AND NOT i.current
      AND a.outcome IN ('running', 'expired', 'cancelled')  -- a repeated call changes nothing
      -- Evaluated once, before the join (a one-time filter): a call with no stale attempt, nearly every
      -- one, reads nothing here. A generic plan made while attempts was small scans it whole, and a
      -- herd's drain grows it by every completion: 5.6 ms of a 9.9 ms call at 31,000 rows.
      AND (SELECT bool_or(NOT s.current) FROM input AS s)
    RETURNING a.execution_id
)
-- The ids as text, as the lease hands them out (Executions.complete_many maps them back to the caller's).
SELECT CAST(d.execution_id AS TEXT) AS execution_id, true AS ok FROM done AS d
UNION ALL
-- A stale attempt: ok when it had succeeded already (in this statement's snapshot, a current attempt never has).
SELECT CAST(i.execution_id AS TEXT) AS execution_id,
       EXISTS (SELECT 1 FROM attempts AS s
               WHERE s.execution_id = i.execution_id AND s.attempt = i.attempt
                 AND s.outcome = 'succeeded') AS ok
FROM input AS i
WHERE NOT i.current;

-- name: ExecutionRetryPolicyMany
-- The effective retry policy (replay override or the job's) of many executions, with the retry deadline's inputs: the job's maxRetryDurationSeconds and how long ago the first attempt started.
SELECT e.execution_id,
       coalesce(e.backoff_s, j.backoff_s) AS backoff_s,
       coalesce(e.max_backoff_s, j.max_backoff_s) AS max_backoff_s,
       j.max_retry_duration_s,
       extract(epoch FROM coalesce(CAST(:now AS TIMESTAMPTZ), now())
                         - coalesce((SELECT min(a.leased_at) FROM attempts AS a WHERE a.execution_id = e.execution_id),
                                    e.started_at))  -- the first attempt's own row is not written yet
           AS retrying_for_s
FROM executions AS e
JOIN jobs AS j ON j.job_id = e.job_id
WHERE e.execution_id = ANY (CAST(:execution_ids AS UUID[]));

-- name: ExecutionFailMany
-- Record failure of many current attempts at once, writing each attempt's row as it ends: ready again after :delays_s, or dead when not retryable or out of attempts; a stale attempt changes nothing ('discarded'). Rows out: each failed execution's new state; a stale one, or one out of scope, unknown, or changed by a concurrent statement, is missing (lease lost).
-- No two CTEs are joined (see ExecutionCompleteMany): a 500-item call joined input to failed twice by nested loop, 375,000 rows compared (40 ms; docs/performance.md, "Completion").
WITH input AS (
    -- Only executions the caller's credential covers (see ExecutionCompleteMany).
    SELECT i.execution_id, i.attempt, i.error, i.retryable, i.delay_s, i.sent_at, x.tenant_id, x.lease_owner,
           x.started_at, x.lease_until, x.state = 'leased' AND x.attempt = i.attempt AS current, x.scheduled_for
    FROM unnest(CAST(:execution_ids AS UUID[]), CAST(:attempts AS INT[]), CAST(:errors AS TEXT[]),
                CAST(:retryable AS BOOL[]), CAST(:delays_s AS FLOAT8[]), CAST(:scopes AS TEXT[]),
                CAST(:sent_ats AS TIMESTAMPTZ[]), CAST(:scheduled_fors AS TIMESTAMPTZ[]))
        AS i (execution_id, attempt, error, retryable, delay_s, scope, sent_at, scheduled_for)
    JOIN executions AS x ON x.execution_id = i.execution_id  -- in one partition when the time is known (see ExecutionCompleteMany)
        AND x.scheduled_for >= coalesce(i.scheduled_for, '-infinity') AND x.scheduled_for <= coalesce(i.scheduled_for, 'infinity')
    WHERE (i.scope IS NULL OR x.queue = i.scope OR (right(i.scope, 1) = ':' AND left(x.queue, length(i.scope)) = i.scope))
), clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), failed AS (
    UPDATE executions AS e SET
        state = CASE WHEN i.retryable AND e.attempt < e.max_attempts THEN 'ready' ELSE 'dead' END,
        ready_at = CASE WHEN i.retryable AND e.attempt < e.max_attempts
                        THEN c.now + i.delay_s * INTERVAL '1 second' ELSE e.ready_at END,
        finished_at = CASE WHEN i.retryable AND e.attempt < e.max_attempts THEN NULL ELSE c.now END,
        error = i.error, lease_owner = NULL, lease_until = NULL,
        started_at = coalesce(i.sent_at, e.started_at)  -- an HTTP delivery started when its request was sent
    FROM input AS i, clock AS c
    WHERE e.execution_id = i.execution_id AND e.scheduled_for = i.scheduled_for AND i.current
      AND e.state = 'leased' AND e.attempt = i.attempt  -- a stale attempt changes nothing
    -- What the attempt's row needs, the live attempt's owner and times as they were (input's).
    RETURNING e.execution_id, e.state, e.ready_at, e.attempt, e.tenant_id, i.lease_owner, i.started_at,
              i.lease_until, c.now, i.error, i.sent_at, e.scheduled_for
), recorded AS (
    INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at,
                          outcome, error, sent_at, scheduled_for)
    SELECT f.execution_id, f.attempt, f.tenant_id, f.lease_owner, f.started_at, f.lease_until, f.now, 'failed', f.error,
           f.sent_at, f.scheduled_for
    FROM failed AS f
    ON CONFLICT (execution_id, attempt, scheduled_for) DO UPDATE SET  -- a 'running' row opened at lease time (before 2026-12)
        outcome = 'failed', finished_at = excluded.finished_at, error = excluded.error
    RETURNING execution_id
), discarded AS (
    UPDATE attempts AS a SET outcome = 'discarded', finished_at = coalesce(CAST(:now AS TIMESTAMPTZ), now()),
                             error = i.error
    FROM input AS i
    WHERE a.execution_id = i.execution_id AND a.attempt = i.attempt AND NOT i.current
      AND a.outcome IN ('running', 'expired', 'cancelled')  -- a repeated call changes nothing
      AND (SELECT bool_or(NOT s.current) FROM input AS s)  -- once, before the join (see ExecutionCompleteMany)
    RETURNING a.execution_id
)
SELECT f.execution_id, f.state, f.ready_at FROM failed AS f;

-- name: ExecutionDeferMany
-- Hand leased executions back unrun for :delays_s (an open circuit breaker): the attempt spent on the lease is refunded and its attempts row removed.
WITH input AS (
    SELECT * FROM unnest(CAST(:execution_ids AS UUID[]), CAST(:attempts AS INT[]), CAST(:delays_s AS FLOAT8[]))
        AS i (execution_id, attempt, delay_s)
), deferred AS (
    UPDATE executions AS e SET
        state = 'ready',
        ready_at = coalesce(CAST(:now AS TIMESTAMPTZ), now()) + i.delay_s * INTERVAL '1 second',
        max_attempts = e.max_attempts + 1,
        lease_owner = NULL, lease_until = NULL
    FROM input AS i
    WHERE e.execution_id = i.execution_id
      AND e.state = 'leased' AND e.attempt = i.attempt  -- a stale attempt changes nothing
    RETURNING e.execution_id, e.attempt
), forgotten AS (
    DELETE FROM attempts AS a
    USING deferred AS d
    WHERE a.execution_id = d.execution_id AND a.attempt = d.attempt
    RETURNING a.execution_id
)
SELECT execution_id FROM deferred;

-- name: ExecutionReapExpired
-- Return up to :limit executions whose lease expired to ready, or to dead when that expiry spent the last attempt; their attempts rows are written, ended 'expired'.
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), expired AS (
    SELECT e.execution_id, e.attempt, e.tenant_id, e.lease_owner, e.started_at, e.lease_until, e.scheduled_for
    FROM executions AS e, clock AS c
    WHERE e.lease_until < c.now  -- leased and expired (executions_leased_until)
    ORDER BY e.lease_until
    LIMIT CAST(:limit AS INT)
    FOR UPDATE OF e SKIP LOCKED
), reaped AS (
    UPDATE executions AS e SET
        state = CASE WHEN e.attempt < e.max_attempts THEN 'ready' ELSE 'dead' END,
        ready_at = c.now,
        finished_at = CASE WHEN e.attempt < e.max_attempts THEN NULL ELSE c.now END,
        error = 'lease expired (attempt ' || CAST(e.attempt AS TEXT) || ', worker ' || e.lease_owner || ')',
        lease_owner = NULL, lease_until = NULL
    FROM expired AS x, clock AS c
    WHERE e.execution_id = x.execution_id AND e.scheduled_for = x.scheduled_for  -- one weekly partition each
      AND e.state = 'leased' AND e.attempt = x.attempt  -- a stale attempt changes nothing
      AND e.lease_until < c.now  -- a heartbeat that landed first keeps its lease
    RETURNING e.execution_id, e.attempt, e.state, e.error
), closed AS (
    INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at,
                          outcome, error, scheduled_for)
    SELECT x.execution_id, x.attempt, x.tenant_id, x.lease_owner, x.started_at, x.lease_until, c.now, 'expired', r.error,
           x.scheduled_for
    FROM reaped AS r JOIN expired AS x ON x.execution_id = r.execution_id, clock AS c
    ON CONFLICT (execution_id, attempt, scheduled_for) DO UPDATE SET  -- a 'running' row opened at lease time (before 2026-12)
        outcome = 'expired', finished_at = excluded.finished_at, error = excluded.error
    RETURNING execution_id
)
SELECT state, count(*) AS n FROM reaped GROUP BY state;

-- name: ExecutionReplay
-- Make one of a tenant's dead executions ready again with a fresh attempt budget, optionally with a new payload and retry policy.
UPDATE executions AS e SET
    state = 'ready', ready_at = coalesce(CAST(:now AS TIMESTAMPTZ), now()), finished_at = NULL, result = NULL,
    max_attempts = e.attempt + coalesce(CAST(:max_attempts AS INT), j.max_attempts),
    payload = coalesce(CAST(:payload AS JSONB), e.payload),
    backoff_s = coalesce(CAST(:backoff_s AS FLOAT8), e.backoff_s),
    max_backoff_s = coalesce(CAST(:max_backoff_s AS FLOAT8), e.max_backoff_s)
FROM jobs AS j
WHERE e.execution_id = :execution_id AND e.tenant_id = :tenant_id AND j.job_id = e.job_id
  AND e.state = 'dead'  -- only a dead letter is replayed
RETURNING e.execution_id, e.job_id, e.attempt, e.max_attempts, e.ready_at;

-- name: ExecutionReplayDeadMany
-- Replay up to :limit of a tenant's dead executions matching a filter (job, finished window), newest first.
WITH picked AS (
    SELECT execution_id FROM executions
    WHERE tenant_id = :tenant_id AND state = 'dead'
      AND (CAST(:job_id AS UUID) IS NULL OR job_id = CAST(:job_id AS UUID))
      AND (CAST(:finished_after AS TIMESTAMPTZ) IS NULL OR finished_at >= CAST(:finished_after AS TIMESTAMPTZ))
      AND (CAST(:finished_before AS TIMESTAMPTZ) IS NULL OR finished_at < CAST(:finished_before AS TIMESTAMPTZ))
    ORDER BY finished_at DESC, execution_id DESC
    LIMIT CAST(:limit AS INT)
)
UPDATE executions AS e SET
    state = 'ready', ready_at = coalesce(CAST(:now AS TIMESTAMPTZ), now()), finished_at = NULL, result = NULL,
    max_attempts = e.attempt + j.max_attempts
FROM picked AS p, jobs AS j
WHERE e.execution_id = p.execution_id AND j.job_id = e.job_id
  AND e.state = 'dead'  -- only a dead letter is replayed
RETURNING e.execution_id;

-- name: ExecutionListDead
-- A page of a tenant's dead letters, newest first, optionally for one job; keyset cursor on (finished_at, execution_id).
SELECT execution_id, job_id, queue, scheduled_for, attempt, max_attempts, finished_at, error
FROM executions
-- The cursor is a plain row comparison (none: past every row), a range of executions_dead, and the job
-- filter a CASE, which a generic plan estimates at one half (`x IS NULL OR ...` at a fraction of a
-- percent, and the plan then sorts every dead letter of the tenant): one page read, not them all.
WHERE tenant_id = :tenant_id AND state = 'dead'
  AND (finished_at, execution_id) < (coalesce(CAST(:before_finished AS TIMESTAMPTZ),
                                              CAST('9999-12-31T00:00:00Z' AS TIMESTAMPTZ)),
                                     coalesce(CAST(:before_id AS UUID),
                                              CAST('ffffffff-ffff-ffff-ffff-ffffffffffff' AS UUID)))
  AND CASE WHEN CAST(:job_id AS UUID) IS NULL THEN true ELSE job_id = CAST(:job_id AS UUID) END
ORDER BY finished_at DESC, execution_id DESC
LIMIT :limit;

-- name: ExecutionGetForTenant
-- One of a tenant's executions (another tenant's id finds nothing, like an unknown one).
SELECT execution_id, job_id, tenant_id, queue, scheduled_for, attempt, max_attempts, state, ready_at,
       lease_owner, lease_until, started_at, finished_at, error, result
FROM executions WHERE tenant_id = :tenant_id AND execution_id = :execution_id;

-- name: ExecutionCountReadyByQueue
-- Executions due and waiting for a worker (ready, ready_at reached), per queue: the executor's kairos_ready_queue_depth gauge; an index-only range of executions_ready_at per queue.
SELECT queue, count(*) AS ready
FROM executions
WHERE state = 'ready' AND ready_at <= coalesce(CAST(:now AS TIMESTAMPTZ), now())
GROUP BY queue;

-- name: ExecutionLeaseRenewMany
-- Renew many current attempts held by :worker_id (the HTTP pool's deliveries, sent or waiting for a slot) to now + :lease_s, never past started_at + the job's timeout; restarts[i] first moves the attempt's start to now (a delivery still waiting has not started: it keeps its whole timeout; its attempts row, written when it ends, says so). Answers the renewed ones.
WITH input AS (
    SELECT * FROM unnest(CAST(:execution_ids AS UUID[]), CAST(:attempts AS INT[]), CAST(:restarts AS BOOL[]),
                         CAST(:scheduled_fors AS TIMESTAMPTZ[]))
        AS i (execution_id, attempt, restart, scheduled_for)
), clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), renewed AS (
    UPDATE executions AS e SET
        started_at = CASE WHEN i.restart THEN c.now ELSE e.started_at END,
        lease_until = least(c.now + CAST(:lease_s AS FLOAT8) * INTERVAL '1 second',
                            CASE WHEN i.restart THEN c.now ELSE e.started_at END
                                + CAST(j.timeout_s AS FLOAT8) * INTERVAL '1 second')
    FROM input AS i, jobs AS j, clock AS c
    WHERE e.execution_id = i.execution_id AND j.job_id = e.job_id
      AND e.scheduled_for >= coalesce(i.scheduled_for, '-infinity')  -- one weekly partition when known
      AND e.scheduled_for <= coalesce(i.scheduled_for, 'infinity')
      AND e.state = 'leased' AND e.attempt = i.attempt  -- a stale attempt changes nothing
      AND e.lease_owner = :worker_id  -- only the holder renews
      AND (i.restart OR e.started_at + CAST(j.timeout_s AS FLOAT8) * INTERVAL '1 second' > c.now)  -- timed out: no more
    RETURNING e.execution_id, e.lease_until
)
SELECT execution_id, lease_until FROM renewed;

-- name: ExecutionDeadFinishedAt
-- The scheduled occurrences dead-lettered at exactly :finished_at (the reaper's clock, one value per transaction) whose job pauses on failure: what the reaper just dead-lettered, for JobPauseOnFailureMany (executions_finished finds them).
SELECT e.execution_id FROM executions AS e
JOIN jobs AS j ON j.job_id = e.job_id
WHERE e.finished_at = coalesce(CAST(:finished_at AS TIMESTAMPTZ), now())
  AND e.state = 'dead' AND e.trigger = 'schedule' AND j.pause_on_failure;
