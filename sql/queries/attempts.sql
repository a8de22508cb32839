-- name: AttemptListForExecution
-- Every attempt of one of a tenant's executions, oldest first (including discarded late results); the live attempt (not yet ended, so without an attempts row) comes from the executions row.
SELECT execution_id, attempt, worker_id, leased_at, lease_until, finished_at, outcome, error, result, sent_at
FROM attempts
WHERE tenant_id = :tenant_id AND execution_id = :execution_id
UNION ALL
SELECT e.execution_id, e.attempt, e.lease_owner, e.started_at, e.lease_until, NULL, 'running', NULL, NULL,
       CAST(NULL AS TIMESTAMPTZ)  -- not sent yet, or a worker's: its lease is its start
FROM executions AS e
WHERE e.tenant_id = :tenant_id AND e.execution_id = :execution_id AND e.state = 'leased'
  AND NOT EXISTS (SELECT 1 FROM attempts AS a  -- a 'running' row opened at lease time (before 2026-12)
                  WHERE a.execution_id = e.execution_id AND a.attempt = e.attempt)
ORDER BY attempt;

-- name: AttemptListForExecutions
-- Every attempt of several of a tenant's executions (a page of a job's history), by execution and attempt; live attempts from the executions rows (see AttemptListForExecution).
SELECT execution_id, attempt, worker_id, leased_at, lease_until, finished_at, outcome, error, result, sent_at
FROM attempts
WHERE tenant_id = :tenant_id AND execution_id = ANY (CAST(:execution_ids AS UUID[]))
UNION ALL
SELECT e.execution_id, e.attempt, e.lease_owner, e.started_at, e.lease_until, NULL, 'running', NULL, NULL,
       CAST(NULL AS TIMESTAMPTZ)  -- not sent yet, or a worker's: its lease is its start
FROM executions AS e
WHERE e.tenant_id = :tenant_id AND e.execution_id = ANY (CAST(:execution_ids AS UUID[])) AND e.state = 'leased'
  AND NOT EXISTS (SELECT 1 FROM attempts AS a
                  WHERE a.execution_id = e.execution_id AND a.attempt = e.attempt)
ORDER BY execution_id, attempt;

-- name: ReplayBudgetEnsure
-- Create a tenant's bulk-replay window row (an empty, long-expired window) if it has none.
INSERT INTO replay_budgets (tenant_id, window_start, used)
VALUES (:tenant_id, CAST('2000-01-01T00:00:00Z' AS TIMESTAMPTZ), 0)
ON CONFLICT (tenant_id) DO NOTHING;

-- name: ReplayBudgetGet
-- A tenant's bulk-replay window, locked for the update that follows, with the database clock.
SELECT used, window_start, coalesce(CAST(:now AS TIMESTAMPTZ), now()) AS now
FROM replay_budgets WHERE tenant_id = :tenant_id
FOR UPDATE;

-- name: ReplayBudgetPut
-- Store a tenant's bulk-replay window after a grant.
UPDATE replay_budgets SET window_start = :window_start, used = :used
WHERE tenant_id = :tenant_id;
