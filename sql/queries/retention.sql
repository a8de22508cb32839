-- name: RetentionTakeExecutions
-- Delete up to :limit final executions that finished more than :retention_s before now (oldest first; a restored one only once its restore is as old), returning every column for the archive; ready and leased executions are never touched. PostgreSQL: from the legacy partition only (rows scheduled before the weekly partitions); a weekly partition leaves whole (HistoryPartitionDrop).
WITH old AS (
    SELECT e.execution_id FROM executions_legacy AS e
    WHERE e.finished_at < coalesce(CAST(:now AS TIMESTAMPTZ), now()) - CAST(:retention_s AS FLOAT8) * INTERVAL '1 second'
      AND e.state IN ('succeeded', 'dead', 'cancelled', 'skipped')
      AND (e.restored_at IS NULL
           OR e.restored_at < coalesce(CAST(:now AS TIMESTAMPTZ), now()) - CAST(:retention_s AS FLOAT8) * INTERVAL '1 second')
    ORDER BY e.finished_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED  -- another executor's pass takes other rows
)
DELETE FROM executions_legacy AS e
USING old
WHERE e.execution_id = old.execution_id
  AND e.state IN ('succeeded', 'dead', 'cancelled', 'skipped')  -- final only: a replayed one is live again
RETURNING e.*;

-- name: RetentionTakeAttempts
-- Delete the attempts of executions being archived, returning every column for the archive (PostgreSQL: the legacy partition's, where the attempts of the legacy partition's executions are).
DELETE FROM attempts_legacy
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
-- Load archived attempts back for executions that are present, with their execution's scheduled_for (archives written before attempts carried it have none); an attempt already there is left alone.
INSERT INTO attempts (execution_id, attempt, tenant_id, worker_id, leased_at, lease_until, finished_at, outcome,
                      error, result, sent_at, scheduled_for)
SELECT a.execution_id, a.attempt, a.tenant_id, a.worker_id, a.leased_at, a.lease_until, a.finished_at, a.outcome,
       a.error, a.result, a.sent_at, e.scheduled_for
FROM jsonb_populate_recordset(CAST(NULL AS attempts), CAST(:rows AS JSONB)) AS a
JOIN executions AS e ON e.execution_id = a.execution_id
ON CONFLICT DO NOTHING
RETURNING execution_id;

-- name: HistoryPartitionsEnsure
-- PostgreSQL: create the weekly partitions of executions and attempts for every week from :from_at to :to_at that has none (the weeks from the cutover on); how many were created.
SELECT kairos_history_partitions_ensure(CAST(:from_at AS TIMESTAMPTZ), CAST(:to_at AS TIMESTAMPTZ)) AS created;

-- name: HistoryPartitionsCover
-- PostgreSQL: create the weekly partitions that rows scheduled at :scheduled_fors need and that do not exist (a backfill, a catch-up or a restore into a week retention dropped); how many were created.
SELECT kairos_history_partitions_cover(CAST(:scheduled_fors AS TIMESTAMPTZ[])) AS created;

-- name: HistoryPartitionsList
-- PostgreSQL: the weeks that have a partition of executions, oldest first.
SELECT lo, hi FROM kairos_history_partitions() ORDER BY lo;

-- name: HistoryPartitionHeld
-- What keeps the week [:lo, :hi) from leaving: its live executions (ready, leased: each partition's partial indexes), and the latest finished_at and restored_at in it (their partial indexes, read backwards).
SELECT (SELECT count(*) FROM executions AS e
        WHERE e.scheduled_for >= CAST(:lo AS TIMESTAMPTZ) AND e.scheduled_for < CAST(:hi AS TIMESTAMPTZ)
          AND e.state = 'ready') AS ready,
       (SELECT count(*) FROM executions AS e
        WHERE e.scheduled_for >= CAST(:lo AS TIMESTAMPTZ) AND e.scheduled_for < CAST(:hi AS TIMESTAMPTZ)
          AND e.lease_until IS NOT NULL) AS leased,
       (SELECT max(e.finished_at) FROM executions AS e
        WHERE e.scheduled_for >= CAST(:lo AS TIMESTAMPTZ) AND e.scheduled_for < CAST(:hi AS TIMESTAMPTZ)
          AND e.finished_at IS NOT NULL) AS finished_at,
       (SELECT max(e.restored_at) FROM executions AS e
        WHERE e.scheduled_for >= CAST(:lo AS TIMESTAMPTZ) AND e.scheduled_for < CAST(:hi AS TIMESTAMPTZ)
          AND e.restored_at IS NOT NULL) AS restored_at;

-- name: HistoryPartitionExecutions
-- Up to :limit executions of the week [:lo, :hi) after :after_id (NULL: from the first), by execution_id, every column (the week's archive, in batches; nothing is deleted).
SELECT * FROM executions AS e
WHERE e.scheduled_for >= CAST(:lo AS TIMESTAMPTZ) AND e.scheduled_for < CAST(:hi AS TIMESTAMPTZ)
  AND e.execution_id > coalesce(CAST(:after_id AS UUID), CAST('00000000-0000-0000-0000-000000000000' AS UUID))
ORDER BY e.execution_id
LIMIT :limit;

-- name: HistoryPartitionAttempts
-- The attempts of the executions :execution_ids of the week [:lo, :hi), every column (for the week's archive).
SELECT * FROM attempts AS a
WHERE a.scheduled_for >= CAST(:lo AS TIMESTAMPTZ) AND a.scheduled_for < CAST(:hi AS TIMESTAMPTZ)
  AND a.execution_id = ANY (CAST(:execution_ids AS UUID[]));

-- name: HistoryPartitionDrop
-- PostgreSQL: detach and drop the partitions of attempts and executions of the week starting :lo, once archived, unless it holds live work or a row finished or restored at or after :cutoff ('held': nothing changes); 'dropped', 'held' or 'absent'. Each lock that blocks writes is waited for at most 200 ms at a time.
SELECT kairos_history_partition_drop(CAST(:lo AS TIMESTAMPTZ), CAST(:cutoff AS TIMESTAMPTZ)) AS outcome;

-- name: JobRemovalTake
-- Delete up to :limit jobs that asked to be removed once finished (deleteAfterCompletionSeconds): completed or cancelled, nothing left to run (no execution ready or leased, no buffer_one occurrence waiting), and their last change and every execution's finish at least their delay old; returning every column for the archive. jobs_removal finds them; FOR UPDATE SKIP LOCKED: schedulers removing at once take different jobs.
WITH due AS (
    SELECT j.job_id FROM jobs AS j
    WHERE j.delete_after_s IS NOT NULL AND j.state IN ('completed', 'cancelled')
      AND j.buffered_at IS NULL  -- a buffer_one occurrence still waits: the BufferStarter settles it first
      AND j.updated_at <= coalesce(CAST(:now AS TIMESTAMPTZ), now()) - CAST(j.delete_after_s AS FLOAT8) * INTERVAL '1 second'
      AND NOT EXISTS (
          SELECT 1 FROM executions AS e
          WHERE e.job_id = j.job_id
            AND (e.state IN ('ready', 'leased')
                 OR e.finished_at > coalesce(CAST(:now AS TIMESTAMPTZ), now())
                                    - CAST(j.delete_after_s AS FLOAT8) * INTERVAL '1 second'))
    ORDER BY j.updated_at
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
DELETE FROM jobs AS j
USING due
WHERE j.job_id = due.job_id
  AND j.state IN ('completed', 'cancelled')  -- finished only: a job resumed meanwhile stays
RETURNING j.*;

-- name: JobRemovalTakeExecutions
-- Delete the executions of jobs being removed, returning every column for the archive; only final ones (one replayed meanwhile is live again and stays).
DELETE FROM executions
WHERE job_id = ANY (CAST(:job_ids AS UUID[]))
  AND state IN ('succeeded', 'dead', 'cancelled', 'skipped')
RETURNING *;

-- name: JobRemovalTakeAttempts
-- Delete the attempts of executions being removed with their job, returning every column for the archive.
DELETE FROM attempts
WHERE execution_id = ANY (CAST(:execution_ids AS UUID[]))
RETURNING *;
