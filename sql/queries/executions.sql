-- name: ExecutionListForJob
-- A page of one job's executions, newest occurrence first; keyset cursor on (scheduled_for, execution_id).
SELECT execution_id, scheduled_for, attempt, state, started_at, finished_at, error, skip_reason
FROM executions
WHERE job_id = :job_id AND tenant_id = :tenant_id
  AND (CAST(:before_scheduled AS TIMESTAMPTZ) IS NULL
       OR (scheduled_for, execution_id) < (CAST(:before_scheduled AS TIMESTAMPTZ), CAST(:before_id AS UUID)))
ORDER BY scheduled_for DESC, execution_id DESC
LIMIT :limit;

-- name: ExecutionCancelUnstartedForJob
-- Cancel a job's executions that no worker holds yet (job deleted).
UPDATE executions SET state = 'cancelled', finished_at = now(), error = 'job cancelled'
WHERE job_id = :job_id AND tenant_id = :tenant_id
  AND state = 'ready'  -- started (leased) work finishes; its result is still recorded
RETURNING execution_id;
