-- CockroachDB's retention statements: one table, no partitions (sql/queries/retention.sql takes from
-- PostgreSQL's legacy partitions; weekly partitions leave whole, app/store/partitions.py).

-- name: RetentionTakeExecutions
-- CockroachDB: delete up to :limit final executions that finished more than :retention_s before now (oldest first; a restored one only once its restore is as old), returning every column for the archive; ready and leased executions are never touched.
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
-- CockroachDB: delete the attempts of executions being archived, returning every column for the archive.
DELETE FROM attempts
WHERE execution_id = ANY (CAST(:execution_ids AS UUID[]))
RETURNING *;

-- name: HistoryPartitionsEnsure
-- CockroachDB: history is one table with row-level TTL (the overlay); there is no partition to create.
SELECT 0 AS created
WHERE CAST(:from_at AS TIMESTAMPTZ) IS NULL AND CAST(:to_at AS TIMESTAMPTZ) IS NULL;

-- name: HistoryPartitionsCover
-- CockroachDB: no partition to create.
SELECT 0 AS created WHERE CAST(:scheduled_fors AS TIMESTAMPTZ[]) IS NULL;

-- name: HistoryPartitionsList
-- CockroachDB: no weekly partitions (row-level TTL).
SELECT CAST(NULL AS TIMESTAMPTZ) AS lo, CAST(NULL AS TIMESTAMPTZ) AS hi WHERE false;

-- name: HistoryPartitionDrop
-- CockroachDB: no partition to drop.
SELECT 'absent' AS outcome WHERE CAST(:lo AS TIMESTAMPTZ) IS NULL AND CAST(:cutoff AS TIMESTAMPTZ) IS NULL;
