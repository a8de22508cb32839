-- CockroachDB's text of executions statements (app/store/queries.py picks it on a cockroachdb engine;
-- PostgreSQL runs sql/queries/executions.sql unchanged). Same names, same parameters, same rows out;
-- each is also valid PostgreSQL, which is how tests/integration/test_cockroach_statements.py runs them.
-- Why each differs, and the CockroachDB docs page for every construct: docs/cockroachdb.md.

-- name: ExecutionLeaseFair
-- CockroachDB: ExecutionLeaseFair without the recursive loose index scan (tenants with ready work found by one probe of executions_ready per tenant of the GLOBAL tenants table), without a LIMIT that reads a column of the outer query (a constant :limit per tenant, capped after), and with the locking read a plain SELECT ... FOR UPDATE SKIP LOCKED of the picked rows.
WITH clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), quota AS (
    SELECT t.tenant_id, t.weight, c.now, t.max_inflight - l.leased AS room
    FROM tenants AS t, clock AS c,
         -- Leased (executions_leased_by_queue), counted once per tenant: room is read twice below.
         LATERAL (SELECT count(*) AS leased FROM executions AS x
                  WHERE x.queue = :queue AND x.tenant_id = t.tenant_id AND x.lease_until IS NOT NULL) AS l
    WHERE EXISTS (SELECT 1 FROM executions AS r
                  WHERE r.queue = :queue AND r.tenant_id = t.tenant_id AND r.state = 'ready')
      AND NOT (t.tenant_id = ANY (CAST(:skip_tenants AS UUID[])))  -- the HTTP pool's waiting tenants
), share AS (
    -- As on PostgreSQL; sum() of INT is DECIMAL on CockroachDB, so both sides of / are FLOAT8.
    SELECT q.*, q.weight * CAST(ceil(CAST(:limit AS FLOAT8) / CAST(sum(q.weight) OVER () AS FLOAT8)) AS INT) AS most
    FROM quota AS q
    WHERE q.room > 0
), candidates AS (
    SELECT c.execution_id, c.attempt, q.tenant_id, q.weight, q.now, q.room, q.most,
           row_number() OVER (PARTITION BY q.tenant_id ORDER BY c.ready_at, c.scheduled_for, c.execution_id) AS turn
    FROM share AS q
    CROSS JOIN LATERAL (
        SELECT e.execution_id, e.attempt, e.ready_at, e.scheduled_for FROM executions AS e
        WHERE e.queue = :queue AND e.tenant_id = q.tenant_id
          AND e.state = 'ready' AND e.ready_at <= q.now
        ORDER BY e.ready_at
        LIMIT CAST(:limit AS INT)
    ) AS c
), capped AS (
    SELECT * FROM candidates WHERE turn <= least(room, most)  -- room > 0: a lowered quota leases nothing
), picked AS (
    -- Round r holds each tenant's turns r*weight+1 .. (r+1)*weight (floor division spelled out: / of two
    -- INTs is DECIMAL on CockroachDB); tenants take turns in an order that rotates per call (:salt).
    SELECT execution_id, attempt, now FROM capped
    ORDER BY floor(CAST(turn - 1 AS FLOAT8) / CAST(weight AS FLOAT8)),
             md5(CAST(tenant_id AS TEXT) || CAST(:salt AS TEXT)), turn
    LIMIT CAST(:limit AS INT)
), locked AS (
    -- Rows another leaser holds are skipped; the guarded UPDATE below is what makes a lease safe.
    SELECT e.execution_id FROM executions AS e
    WHERE e.execution_id IN (SELECT execution_id FROM picked) AND e.state = 'ready'
    FOR UPDATE SKIP LOCKED
), leased AS (
    UPDATE executions AS e SET
        state = 'leased',
        attempt = e.attempt + 1,
        lease_owner = :worker_id,
        started_at = p.now,
        lease_until = p.now + least(CAST(:lease_s AS FLOAT8), CAST(j.timeout_s AS FLOAT8)) * INTERVAL '1 second'
    FROM picked AS p, jobs AS j
    WHERE e.execution_id = p.execution_id AND j.job_id = e.job_id
      AND e.execution_id IN (SELECT execution_id FROM locked)
      AND e.state = 'ready' AND e.attempt = p.attempt  -- a concurrent lease of the same row changes nothing
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
       CASE WHEN l.payload IS NULL THEN j.payload_ref END AS payload_ref,
       l.trigger,  -- schedule, manual or backfill: only scheduled occurrences count in start lag
       j.http_auth,  -- an HTTP target's auth object: the identity token it asks for (docs/http-delivery.md)
       -- The key that signs that token now: its id and sealed private half (app/store/oidc_keys.py; the
       -- latest signs_from not in the future: a rotation's new key is published before it signs).
       CASE WHEN j.http_auth IS NOT NULL THEN (SELECT key_id FROM signer) END AS oidc_key_id,
       CASE WHEN j.http_auth IS NOT NULL THEN (SELECT private_key FROM signer) END AS oidc_key
FROM leased AS l
JOIN jobs AS j ON j.job_id = l.job_id
JOIN tenants AS t ON t.tenant_id = l.tenant_id
-- The batch in queue order, a job's occurrences in scheduled order (a backfill's several due at one lease
-- are handed out oldest first); the UPDATE returns them in whatever order its plan visited them.
ORDER BY l.ready_at, l.scheduled_for;

-- name: ExecutionCompleteMany
-- CockroachDB: ExecutionCompleteMany with one modification of attempts (CockroachDB refuses two in one statement): the current attempts' rows and the stale attempts' 'discarded' results are one INSERT ... ON CONFLICT DO UPDATE.
WITH input AS (
    SELECT i.execution_id, i.attempt, i.result, i.sent_at, x.tenant_id, x.lease_owner, x.started_at, x.lease_until,
           x.scheduled_for, x.state = 'leased' AND x.attempt = i.attempt AS current
    FROM unnest(CAST(:execution_ids AS UUID[]), CAST(:attempts AS INT[]), CAST(:results AS TEXT[]),
                CAST(:scopes AS TEXT[]), CAST(:sent_ats AS TIMESTAMPTZ[]), CAST(:scheduled_fors AS TIMESTAMPTZ[]))
        AS i (execution_id, attempt, result, scope, sent_at, scheduled_for)  -- scheduled_for: one table here, nothing to prune
    JOIN executions AS x ON x.execution_id = i.execution_id
    WHERE (i.scope IS NULL OR x.queue = i.scope OR (right(i.scope, 1) = ':' AND left(x.queue, length(i.scope)) = i.scope))
), clock AS (
    SELECT coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
), done AS (
    UPDATE executions AS e SET
        state = 'succeeded', finished_at = c.now, result = CAST(i.result AS JSONB), error = NULL,
        lease_owner = NULL, lease_until = NULL,
        started_at = coalesce(i.sent_at, e.started_at)  -- an HTTP delivery started when its request was sent
    FROM input AS i, clock AS c
    WHERE e.execution_id = i.execution_id AND i.current
      AND e.state = 'leased' AND e.attempt = i.attempt  -- a stale attempt changes nothing
    RETURNING e.execution_id
), ended AS (
    INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at,
                          outcome, result, sent_at, scheduled_for)
    SELECT i.execution_id, i.attempt, i.tenant_id, i.lease_owner, i.started_at, i.lease_until, c.now,
           'succeeded', CAST(i.result AS JSONB), i.sent_at, i.scheduled_for
    FROM input AS i, clock AS c
    WHERE i.execution_id IN (SELECT execution_id FROM done)
    UNION ALL
    -- A stale attempt's row exists (it ended 'expired' or 'cancelled'): proposed as it is, so the
    -- conflict below only marks its late result 'discarded'.
    SELECT a.execution_id, a.attempt, a.tenant_id, a.worker_id, a.leased_at, a.lease_until, c.now,
           'discarded', CAST(i.result AS JSONB), a.sent_at, a.scheduled_for
    FROM input AS i
    JOIN attempts AS a ON a.execution_id = i.execution_id AND a.attempt = i.attempt, clock AS c
    WHERE NOT i.current
      AND a.outcome IN ('running', 'expired', 'cancelled')  -- a repeated call changes nothing
    ON CONFLICT (execution_id, attempt, scheduled_for) DO UPDATE SET
        outcome = excluded.outcome, finished_at = excluded.finished_at, result = excluded.result
    RETURNING execution_id
)
SELECT CAST(i.execution_id AS TEXT) AS execution_id,  -- as text, as on PostgreSQL
       (d.execution_id IS NOT NULL
        OR EXISTS (SELECT 1 FROM attempts AS s
                   WHERE s.execution_id = i.execution_id AND s.attempt = i.attempt
                     AND s.outcome = 'succeeded')) AS ok
FROM input AS i LEFT JOIN done AS d ON d.execution_id = i.execution_id;

-- name: ExecutionFailMany
-- CockroachDB: ExecutionFailMany with one modification of attempts, as the CockroachDB ExecutionCompleteMany above.
WITH input AS (
    SELECT i.execution_id, i.attempt, i.error, i.retryable, i.delay_s, i.sent_at, x.tenant_id, x.lease_owner,
           x.started_at, x.lease_until, x.scheduled_for, x.state = 'leased' AND x.attempt = i.attempt AS current
    FROM unnest(CAST(:execution_ids AS UUID[]), CAST(:attempts AS INT[]), CAST(:errors AS TEXT[]),
                CAST(:retryable AS BOOL[]), CAST(:delays_s AS FLOAT8[]), CAST(:scopes AS TEXT[]),
                CAST(:sent_ats AS TIMESTAMPTZ[]), CAST(:scheduled_fors AS TIMESTAMPTZ[]))
        AS i (execution_id, attempt, error, retryable, delay_s, scope, sent_at, scheduled_for)  -- as above: unused here
    JOIN executions AS x ON x.execution_id = i.execution_id
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
    WHERE e.execution_id = i.execution_id AND i.current
      AND e.state = 'leased' AND e.attempt = i.attempt  -- a stale attempt changes nothing
    RETURNING e.execution_id, e.state, e.ready_at
), ended AS (
    INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at,
                          outcome, error, sent_at, scheduled_for)
    SELECT i.execution_id, i.attempt, i.tenant_id, i.lease_owner, i.started_at, i.lease_until, c.now, 'failed', i.error,
           i.sent_at, i.scheduled_for
    FROM input AS i, clock AS c
    WHERE i.execution_id IN (SELECT execution_id FROM failed)
    UNION ALL
    SELECT a.execution_id, a.attempt, a.tenant_id, a.worker_id, a.leased_at, a.lease_until, c.now, 'discarded', i.error,
           a.sent_at, a.scheduled_for
    FROM input AS i
    JOIN attempts AS a ON a.execution_id = i.execution_id AND a.attempt = i.attempt, clock AS c
    WHERE NOT i.current
      AND a.outcome IN ('running', 'expired', 'cancelled')  -- a repeated call changes nothing
    ON CONFLICT (execution_id, attempt, scheduled_for) DO UPDATE SET
        outcome = excluded.outcome, finished_at = excluded.finished_at, error = excluded.error
    RETURNING execution_id
)
SELECT i.execution_id, f.state, f.ready_at
FROM input AS i LEFT JOIN failed AS f ON f.execution_id = i.execution_id;
