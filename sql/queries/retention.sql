-- name: RetentionTakeExecutions
-- Delete up to :limit final executions that finished more than :retention_s before now (oldest first; a restored one only once its restore is as old), returning every column for the archive; ready and leased executions are never touched.
WITH old AS (
    SELECT e.execution_id FROM executions AS e
    WHERE e.finished_at < coalesce(CAST(:now AS TIMESTAMPTZ), now()) - CAST(:retention_s AS FLOAT8) * INTERVAL '1 second'
      AND e.state IN ('succeeded', 'dead', 'cancelled', 'skipped')
      AND (e.restored_at IS NULL
           OR e.restored_at < coalesce(CAST(:now AS TIMESTAMPTZ), now()) - CAST(:retention_s AS FLOAT8) * INTERVAL '1 second')
    ORDER BY e.finished_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED  -- another executor's pass takes other rows
)
DELETE FROM executions AS e
USING old
WHERE e.execution_id = old.execution_id
  AND e.state IN ('succeeded', 'dead', 'cancelled', 'skipped')  -- final only: a replayed one is live again
RETURNING e.*;

-- name: RetentionTakeAttempts
-- Delete the attempts of executions being archived, returning every column for the archive.
DELETE FROM attempts
WHERE execution_id = ANY (CAST(:execution_ids AS UUID[]))
RETURNING *;

-- name: RetentionRestoreExecutions
-- Load archived executions back (JSON objects keyed by column); one whose id or occurrence is present again is left alone, and only finished ones without a lease go in (a restore never makes live work).
INSERT INTO executions
SELECT * FROM jsonb_populate_recordset(CAST(NULL AS executions), CAST(:rows AS JSONB)) AS r
WHERE r.state IN ('succeeded', 'dead', 'cancelled', 'skipped') AND r.finished_at IS NOT NULL
  AND r.lease_owner IS NULL AND r.lease_until IS NULL
ON CONFLICT DO NOTHING
RETURNING execution_id;

-- name: RetentionRestoreAttempts
-- Load archived attempts back for executions that are present; an attempt already there is left alone.
INSERT INTO attempts
SELECT a.* FROM jsonb_populate_recordset(CAST(NULL AS attempts), CAST(:rows AS JSONB)) AS a
WHERE EXISTS (SELECT 1 FROM executions AS e WHERE e.execution_id = a.execution_id)
ON CONFLICT DO NOTHING
RETURNING execution_id;
